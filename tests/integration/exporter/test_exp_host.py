"""Host usage of a workload outside any pod (local mode) comes from the real /proc files of
its own processes — not from the cgroup and network namespace it shares with the machine."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from exporter_harness import publish_workload, running_exporter, scrape, series, settings

from alnair.v1 import metrics_pb2
from alnair_common import subjects
from alnair_common.cuda_region import DeviceRecord
from alnair_common.testing import wait_for
from alnair_common.testing.cuda_region_writer import RegionWriter

# burns 0.5 s of its own CPU time (however busy the machine), says so, then keeps using
# about half a core until it is killed
BUSY = ("import time\nwhile time.process_time()<0.5: pass\nprint('ok', flush=True)\n"
        "while True:\n t=time.time()\n while time.time()-t<0.01: pass\n time.sleep(0.01)\n")


def cgroup_v2_root() -> Path:
    """Where the unified hierarchy is mounted: /sys/fs/cgroup, or .../unified on hybrid hosts."""
    hybrid = Path("/sys/fs/cgroup/unified")
    return hybrid if (hybrid / "cgroup.procs").exists() else Path("/sys/fs/cgroup")


async def test_host_usage_of_a_real_process(nats_server, bus, tmp_path, promtool) -> None:
    cfg = settings(nats_server.url, tmp_path, cgroup_root=cgroup_v2_root())
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", BUSY, stdin=asyncio.subprocess.PIPE,
                                                 stdout=asyncio.subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert await asyncio.wait_for(child.stdout.readline(), 30) == b"ok\n"
        await publish_workload(bus, "uid-h", "host-test")
        (cfg.workspaces / "uid-h").mkdir()
        RegionWriter(cfg.workspaces / "uid-h" / "cuda.region", workload_id="uid-h").write_slot(
            0, pid=1, host_pid=child.pid, devices={0: DeviceRecord(kernel_launches=1)})
        hosts: list[metrics_pb2.HostSample] = []

        async def keep(_: str, batch: metrics_pb2.NodeSampleBatch) -> None:
            hosts.extend(h for h in batch.hosts if h.workload.uid == "uid-h")

        await bus.subscribe(subjects.gpu_metrics("gpu-node-1"), metrics_pb2.NodeSampleBatch, keep)
        async with running_exporter(cfg, gpu=None, resolver=None) as exporter:
            labels = '{namespace="ml",node="gpu-node-1",pod_name="host-test"}'  # exposition order: sorted

            async def cpu() -> float | None:
                return series(await scrape(exporter), "alnair_pod_cpu_seconds_total").get(labels)

            exported = await wait_for(cpu, what="CPU seconds of the workload's process")
            own = await asyncio.to_thread(_process_cpu_seconds, child.pid)
            tick = 1 / os.sysconf("SC_CLK_TCK")  # /proc counts CPU time in clock ticks
            assert 0.5 - 2 * tick <= exported <= own  # its busy loop (0.5 s of CPU), not the machine's
            text = await scrape(exporter)
            assert series(text, "alnair_pod_memory_bytes")[labels] > 1 << 20  # a Python interpreter's RSS
            # the machine's network is not the workload's: no series rather than a wrong one
            assert labels not in series(text, "alnair_pod_network_receive_bytes_total")
            assert promtool(text) == []
            await wait_for(lambda: _some(hosts), what="a HostSample with a CPU rate on the bus")
            assert 0 < max(h.cpu_cores for h in hosts) <= 1.0  # at most its one thread's core
            assert max(h.memory_bytes for h in hosts) > 1 << 20
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


def _process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


async def _some(hosts: list[metrics_pb2.HostSample]) -> bool:
    return any(h.cpu_cores > 0 for h in hosts)


# a reaper like the local agent's: starts the workload (a CPU-bound child) and waits for it
REAPER = ("import subprocess, sys\n"
          "sys.exit(subprocess.call([sys.executable, '-c', sys.argv[1]]))\n")


async def test_a_workload_without_gpu_process_gets_host_series_from_its_process_tree(
        nats_server, bus, tmp_path, promtool) -> None:
    """No GPU process, no CUDA region: only the agent's record of the workload's reaper. The
    CPU-bound grandchild's time is the workload's (the tree, not just the reaper)."""
    cfg = settings(nats_server.url, tmp_path, cgroup_root=cgroup_v2_root())
    reaper = await asyncio.create_subprocess_exec(sys.executable, "-c", REAPER, BUSY,
                                                  stdout=asyncio.subprocess.PIPE, start_new_session=True)
    try:
        assert reaper.stdout is not None
        assert await asyncio.wait_for(reaper.stdout.readline(), 30) == b"ok\n"  # the grandchild burnt 0.5 s
        await publish_workload(bus, "uid-cpu", "cpu-stage")
        (cfg.workspaces / "uid-cpu").mkdir()
        (cfg.workspaces / "uid-cpu" / "pid").write_text(f"{reaper.pid} {_start_time(reaper.pid)}\n")
        hosts: list[metrics_pb2.HostSample] = []

        async def keep(_: str, batch: metrics_pb2.NodeSampleBatch) -> None:
            hosts.extend(h for h in batch.hosts if h.workload.uid == "uid-cpu")

        await bus.subscribe(subjects.gpu_metrics("gpu-node-1"), metrics_pb2.NodeSampleBatch, keep)
        async with running_exporter(cfg, gpu=None, resolver=None) as exporter:
            labels = '{namespace="ml",node="gpu-node-1",pod_name="cpu-stage"}'

            async def cpu() -> float | None:
                return series(await scrape(exporter), "alnair_pod_cpu_seconds_total").get(labels)

            exported = await wait_for(cpu, what="CPU seconds of a workload with no GPU process")
            tick = 1 / os.sysconf("SC_CLK_TCK")
            assert exported >= 0.5 - 2 * tick  # the grandchild's busy loop, though the reaper idles
            text = await scrape(exporter)
            assert series(text, "alnair_pod_memory_bytes")[labels] > 2 << 20  # two interpreters
            # the seed's name: user-mode CPU time in clock ticks
            ticks = series(text, "alnair_cpustat_time_user_hertz_total")[labels]
            assert 0 < ticks <= exported / tick + 1  # user time only: at most all of its CPU time
            assert "# TYPE alnair_cpustat_time_user_hertz_total counter" in text
            assert promtool(text) == []
            await wait_for(lambda: _some(hosts), what="a HostSample with a CPU rate for the CPU-only workload")
            assert 0 < max(h.cpu_cores for h in hosts) <= 1.0
    finally:
        if reaper.returncode is None:
            os.killpg(reaper.pid, signal.SIGKILL)  # the grandchild too (it holds the pipe)
        await reaper.wait()


def _start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat, as the local agent records it."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]
