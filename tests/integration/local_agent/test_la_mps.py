"""MPS mode in local mode (``alnair up --mps``): one control daemon per card, started with
that card alone visible and private pipe and log directories; each workload's limits file
names its card's pipe directory, so the interceptor connects it there with its share as MPS
limits; a daemon that stops answering is started again. The daemon is a stand-in
(``fake_mps_control.py``: CI has no GPU and no MPS); the interceptor is the real one."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import stat
import sys
from pathlib import Path

import pytest
from la_support import NODE, SIM_GPU0, run_cli, start_agent

from alnair.v1 import inventory_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, ConfigError, TypedKV
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for

FAKE_CONTROL = str(Path(__file__).with_name("fake_mps_control.py"))


def starts(data_dir: Path) -> dict[str, list[dict]]:
    found = {}
    for log in data_dir.glob("mps/*/log/started.json"):
        found[log.parent.parent.name] = [json.loads(line) for line in log.read_text().splitlines()]
    return found


def daemon_pid(data_dir: Path, gpu: str) -> int:
    return int((data_dir / "mps" / gpu / "pipe" / "daemon.pid").read_text())


def kill_daemons(data_dir: Path) -> None:
    for pid_file in data_dir.glob("mps/*/pipe/daemon.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


async def stop_agent_and_daemons(agent, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """The agent, then the stand-in daemons it started (they outlive it, as real ones do)."""
    await agent.stop()
    kill_daemons(data_dir)
    # A question to a daemon cut short by the stop must leave no process or pipe behind:
    # collected here, a leaked transport fails this test instead of a later one.
    await asyncio.sleep(0.3)
    gc.collect()


async def test_a_daemon_per_card_workloads_pointed_at_it_and_a_dead_daemon_started_again(
        nats_server: NatsServer, bus: Bus, scheduler, tmp_path: Path, interceptor_lib: Path) -> None:
    data_dir = tmp_path / "data"
    agent = await start_agent(nats_server.url, data_dir, interceptor=interceptor_lib, mps=True,
                              mps_control=FAKE_CONTROL, mps_check_seconds=0.2)
    try:
        started = starts(data_dir)
        assert len(started) == 2  # sim:2x80
        for gpu, runs in started.items():
            assert runs == [{"CUDA_VISIBLE_DEVICES": gpu,
                             "CUDA_MPS_PIPE_DIRECTORY": str(data_dir / "mps" / gpu / "pipe"),
                             "CUDA_MPS_LOG_DIRECTORY": str(data_dir / "mps" / gpu / "log")}]
            assert stat.S_IMODE((data_dir / "mps" / gpu / "pipe").stat().st_mode) == 0o700
        # The inventory says how the cards are shared.
        found = await (await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)).get(NODE)
        assert found is not None
        assert [g.sharing for g in found.value.gpus] == [inventory_pb2.GPU_SHARING_MPS] * 2

        done = await run_cli(["run", "--nats-url", nats_server.url, "--data-dir", str(data_dir),
                              "--name", "mps-job", "--gpu-memory", "2", "--gpu-compute", "30", "--",
                              "true"])
        assert done.returncode == 0, done.stderr
        [uid] = scheduler.bound
        limits = (data_dir / "workloads" / uid / "limits").read_text()
        assert f"mps_pipe_directory = {data_dir / 'mps' / SIM_GPU0 / 'pipe'}" in limits
        assert "compute_percent = 30" in limits

        os.kill(daemon_pid(data_dir, SIM_GPU0), signal.SIGKILL)  # the daemon dies
        async def started_again() -> bool:
            return len(starts(data_dir)[SIM_GPU0]) == 2

        await wait_for(started_again, timeout=10, what="the daemon started again")
        assert agent.service.agent.mps.restarts == 1
    finally:
        await stop_agent_and_daemons(agent, data_dir)


async def test_mps_mode_without_the_interceptor_is_refused_with_the_fix(
        nats_server: NatsServer, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MPS mode needs the interceptor"):
        await start_agent(nats_server.url, tmp_path / "data", mps=True, mps_control=FAKE_CONTROL)


async def test_a_missing_mps_control_program_is_refused_with_the_fix(
        nats_server: NatsServer, tmp_path: Path, interceptor_lib: Path) -> None:
    with pytest.raises(ConfigError, match="cannot run '/nonexistent/mps-control'.*start without --mps"):
        await start_agent(nats_server.url, tmp_path / "data", interceptor=interceptor_lib, mps=True,
                          mps_control="/nonexistent/mps-control")


RECORDED_FAULT = Path(__file__).parents[2] / "data" / "gpu" / "h200" / "mps" / "server_fault.log"


async def test_a_fatal_fault_is_named_in_every_workload_it_ended(
        nats_server: NatsServer, bus: Bus, scheduler, tmp_path: Path, interceptor_lib: Path) -> None:
    """The H200's MPS server log of a real fault (scripts/gpu/mps_fault_check.sh: a CuPy kernel
    writing through a bad pointer, pid 1345, ended a matmul loop's contexts too, pid 1303), its
    pids those of two workloads here: each failed workload's reason names the fault and the
    other workload it ended (the log does not say which of them faulted)."""
    import re

    data_dir = tmp_path / "data"
    agent = await start_agent(nats_server.url, data_dir, interceptor=interceptor_lib, mps=True,
                              mps_control=FAKE_CONTROL, mps_check_seconds=5)
    marker = tmp_path / "fault"
    wait_then = f"import os, sys, time\nwhile not os.path.exists({str(marker)!r}): time.sleep(0.05)\nsys.exit(%d)"
    try:
        runs = {name: asyncio.create_task(run_cli(
            ["run", "--nats-url", nats_server.url, "--data-dir", str(data_dir), "--name", name,
             "--gpu-memory", "2", "--gpu-compute", "30", "--", sys.executable, "-c", wait_then % code],
            timeout=90)) for name, code in (("victim", 3), ("faulter", 1))}

        def pids() -> dict[str, int]:
            found = {}
            for space in (data_dir / "workloads").glob("*"):
                pid_file, sub = space / "child.pid", space / "submission.pb"
                if pid_file.exists() and sub.exists():
                    found[wl.Workload.FromString(sub.read_bytes()).ref.name] = int(pid_file.read_text())
            return found

        async def both_started() -> bool:
            return len(pids()) == 2

        await wait_for(both_started, timeout=60, what="both workloads running")
        got = pids()
        log_text = re.sub(r"\b1345\b", str(got["faulter"]), re.sub(r"\b1303\b", str(got["victim"]),
                                                                    RECORDED_FAULT.read_text()))
        for logs in data_dir.glob("mps/*/log"):  # whichever card they share
            (logs / "server.log").write_text(log_text)
        marker.write_text("")
        victim, faulter = await runs["victim"], await runs["faulter"]
        assert (victim.returncode, faulter.returncode) == (3, 1)
        for run, code, other in ((victim, 3, "faulter"), (faulter, 1, "victim")):
            assert (f"exited with code {code}: a fatal GPU fault on its GPU's MPS server ended the CUDA "
                    f"contexts of this workload and of workload {other!r}") in run.stderr, run.stderr
    finally:
        await stop_agent_and_daemons(agent, data_dir)
