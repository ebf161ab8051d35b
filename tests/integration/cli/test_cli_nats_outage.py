"""Losing NATS under `alnair up`: kill -9 of its nats-server while a workload runs.

The workload finishes during the outage. `alnair up` starts nats-server again (same port,
same store); the local agent's terminal event reaches the bus once it is back — exactly
once — the scheduler releases the share, and `alnair run` rides the outage out and exits
with the workload's own code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import ALNAIR, alive, nats_server_pids

from alnair.v1 import allocation_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, TypedKV, subjects
from alnair_common.natsd import free_port
from alnair_common.testing import wait_for, wait_until


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ALNAIR, *args, "--data-dir", str(data_dir)], capture_output=True,
                          text=True, timeout=30)


def state_of(data_dir: Path, name: str) -> dict | None:
    listed = cli(data_dir, "ps", "--json")
    if listed.returncode != 0:
        return None
    return next((r for r in json.loads(listed.stdout) if r["name"] == name), None)


async def events_of(bus: Bus, uid: str) -> list[wl.WorkloadEvent]:
    sub = await bus.js.pull_subscribe(subjects.workload_events(), stream="WORKLOADS")
    found = []
    try:
        while True:
            try:
                batch = await sub.fetch(100, timeout=1)
            except TimeoutError:
                break
            for msg in batch:
                event = wl.WorkloadEvent.FromString(msg.data)
                if event.workload.ref.uid.startswith(uid):
                    found.append(event)
    finally:
        await sub.unsubscribe()
    return found


@pytest.mark.timeout(240)
async def test_kill_nats_during_a_run(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    log = open(tmp_path / "up.log", "wb")  # noqa: ASYNC230 - the console of `alnair up`
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),  # noqa: ASYNC220
                           "--gpus", "sim:1x80"], stdout=log, stderr=subprocess.STDOUT)
    run = None
    try:
        wait_until(lambda: cli(data_dir, "status").returncode == 0, timeout=120, interval=1.0,
                   what="every service ready")
        marker = tmp_path / "finish"
        run = subprocess.Popen(  # noqa: ASYNC220
            [*ALNAIR, "run", "--data-dir", str(data_dir), "--name", "outage", "--gpu-memory", "8",
             "--", sys.executable, "-c",
             "import os, sys, time\n"
             f"while not os.path.exists({str(marker)!r}): time.sleep(0.05)\n"
             "sys.exit(7)"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        row = wait_until(lambda: (r := state_of(data_dir, "outage")) and r["state"] == "running" and r,
                         timeout=60, what="the workload running")
        [old_nats] = nats_server_pids(port)
        os.kill(old_nats, signal.SIGKILL)
        wait_until(lambda: not alive(old_nats), timeout=10, what="nats-server gone")
        marker.write_text("")  # the workload ends while the bus is down (or coming back)
        out, err = run.communicate(timeout=90)
        assert run.returncode == 7, f"alnair run exited {run.returncode}: {err[-3000:]}"
        assert "Traceback" not in err
        [new_nats] = nats_server_pids(port)
        assert new_nats != old_nats

        bus = await Bus.connect(f"nats://127.0.0.1:{port}", service="cli",
                                credentials=data_dir / "credentials" / "cli.nk")
        try:
            uid = row["uid"]  # `ps` shows the first 8 characters
            # `alnair run` may learn the exit before the agent's event is on the stream (the
            # agent publishes it once its bus is back): wait for it, then count.
            terminal: list[wl.WorkloadEvent] = []

            async def published() -> bool:
                terminal[:] = [e for e in await events_of(bus, uid)
                               if e.workload.phase == wl.WORKLOAD_PHASE_FAILED]
                return bool(terminal)

            await wait_for(published, timeout=30, what="the workload's terminal event on the bus")
            assert len(terminal) == 1 and terminal[0].workload.exit_code == 7, terminal
            allocations = await TypedKV.open(bus, "gpu_allocations", allocation_pb2.CardAllocation)

            async def released() -> bool:
                for key in await allocations.keys():
                    card = await allocations.get(key)
                    if card and any(s.workload.uid.startswith(uid) for s in card.value.shares):
                        return False
                return True

            await wait_for(released, timeout=30, what="the finished workload's share released")
        finally:
            await bus.drain()
        assert state_of(data_dir, "outage")["state"] == "failed"
    finally:
        if run is not None and run.poll() is None:
            run.kill()
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
        log.close()
