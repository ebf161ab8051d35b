"""Per-pod host usage comes from the real cgroup v2 and /proc files of the pod's processes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from exporter_harness import publish_workload, running_exporter, scrape, series, settings

from alnair.v1 import metrics_pb2
from alnair_common import subjects
from alnair_common.cuda_region import DeviceRecord
from alnair_common.cuda_region_writer import RegionWriter
from alnair_common.testing import wait_for

BUSY = "import sys,time\nt=time.time()\nwhile time.time()-t<0.5: pass\nprint('ok', flush=True)\nsys.stdin.read()"


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

            exported = await wait_for(cpu, what="CPU seconds of the pod's cgroup")
            usage = await asyncio.to_thread(_cgroup_cpu_seconds, cfg.cgroup_root, child.pid)
            assert 0.5 <= exported <= usage  # at least the child's busy loop, at most what the cgroup has now
            text = await scrape(exporter)
            assert labels in series(text, "alnair_pod_network_receive_bytes_total")
            assert labels in series(text, "alnair_pod_network_transmit_bytes_total")
            assert promtool(text) == []
            await wait_for(lambda: _some(hosts), what="a HostSample with a CPU rate on the bus")
            assert max(h.cpu_cores for h in hosts) > 0
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


def _cgroup_cpu_seconds(root: Path, pid: int) -> float:
    cgroup = Path(f"/proc/{pid}/cgroup").read_text().split("0::", 1)[1].split()[0]
    stat = (root / cgroup.lstrip("/") / "cpu.stat").read_text()
    return int(stat.split("usage_usec", 1)[1].split()[0]) / 1e6


async def _some(hosts: list[metrics_pb2.HostSample]) -> bool:
    return any(h.cpu_cores > 0 for h in hosts)
