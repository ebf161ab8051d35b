"""`alnair up` as a user runs it: a subprocess with its own data dir and port.

`alnair status` must report every service ready, `alnair events` must show decoded
messages, and SIGINT must stop everything: no service process and no nats-server left.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import ALNAIR, alive, kill_leftovers, nats_server_pids

from alnair.v1 import inventory_pb2, platform_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.errors import PermissionDeniedError
from alnair_common.natsd import free_port
from alnair_common.testing import wait_until


def status(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir), "--json"],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.timeout(240)
async def test_up_status_events_and_clean_stop(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    log = open(tmp_path / "up.log", "wb")  # noqa: ASYNC230 - the console of `alnair up`
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),  # noqa: ASYNC220
                           "--gpus", "sim:2x80"], stdout=log, stderr=subprocess.STDOUT,
                          env={**os.environ, "COLUMNS": "200"})
    service_pids: list[int] = []
    try:
        def all_ready() -> dict | None:
            if up.poll() is not None:
                raise AssertionError(f"alnair up exited {up.returncode}: "
                                     f"{(tmp_path / 'up.log').read_text()[-3000:]}")
            done = status(data_dir)
            return json.loads(done.stdout) if done.returncode == 0 else None

        report = await asyncio.to_thread(wait_until, all_ready, timeout=150, interval=1.0,
                                         what="every service ready")
        names = {s["name"] for s in report["services"]}
        assert {"local-agent", "scheduler", "exporter", "profiler", "elastic-job",
                "cache-hydrator"} <= names
        assert all(s["health"]["ready"] for s in report["services"])
        service_pids = [int(s["pid"]) for s in report["services"]]
        assert all(alive(pid) for pid in service_pids)
        [nats_pid] = nats_server_pids(port)

        # The platform's bus takes no one without credentials …
        with pytest.raises(PermissionDeniedError):
            await Bus.connect(report["nats_url"], service="intruder", first_connect_attempts=1)
        credentials = data_dir / "credentials"
        assert data_dir.stat().st_mode & 0o777 == 0o700  # private by default
        assert credentials.stat().st_mode & 0o777 == 0o700
        assert all(f.stat().st_mode & 0o777 == 0o600 for f in credentials.iterdir())
        # … and a service's identity says only what the service may say.
        bus = await Bus.connect(report["nats_url"], service="scheduler",
                                credentials=credentials / "scheduler.nk")
        try:
            # --gpus sim:2x80 reached the local agent through its environment.
            kv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
            inventories = [(await kv.get(k)).value for k in await kv.keys()]
            assert [len(i.gpus) for i in inventories] == [2] and inventories[0].simulated

            events = subprocess.Popen(  # noqa: ASYNC220 - spawning does not block
                [*ALNAIR, "events", "--data-dir", str(data_dir), "--subject", "alnair.error.>",
                 "--count", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            probe = platform_pb2.ErrorEvent(service="scheduler", code="probe",
                                            message="hello from the test")
            while events.poll() is None:  # until `alnair events` has subscribed and printed
                await bus.publish(subjects.error("scheduler"), probe)
                await asyncio.sleep(0.2)
            out, err = events.communicate(timeout=10)
            assert events.returncode == 0, err
            assert "alnair.error.scheduler ErrorEvent" in out
            assert 'message: "hello from the test"' in out
        finally:
            await bus.drain()

        # A workload end to end: the real scheduler places it, the local agent runs it.
        run = await asyncio.to_thread(
            subprocess.run, [*ALNAIR, "run", "--data-dir", str(data_dir), "--gpu-memory", "8",
                             "--gpu-compute", "30", "--name", "hello", "--", sys.executable,
                             "-c", "import os; print('hello on', os.environ['CUDA_VISIBLE_DEVICES'])"],
            capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert "hello on GPU-sim-" in run.stdout
        listed = await asyncio.to_thread(
            subprocess.run, [*ALNAIR, "ps", "--data-dir", str(data_dir), "--json"],
            capture_output=True, text=True, timeout=30)
        [row] = [r for r in json.loads(listed.stdout) if r["name"] == "hello"]
        assert row["state"] == "succeeded" and row["gpu"].endswith("(sim)")
        too_big = await asyncio.to_thread(
            subprocess.run, [*ALNAIR, "run", "--data-dir", str(data_dir), "--gpu-memory", "100",
                             "--", "true"], capture_output=True, text=True, timeout=60)
        assert too_big.returncode == 1 and "cannot be placed" in too_big.stderr
        # Every service did all of the above within its role's permissions.
        nats_log = (data_dir / "logs" / "nats-server.log").read_text()
        assert "Violation" not in nats_log, [ln for ln in nats_log.splitlines() if "Violation" in ln]

        up.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(up.wait, 60) == 0
        for pid in [*service_pids, nats_pid]:
            assert not alive(pid), f"pid {pid} survived `alnair up` stopping"
        assert nats_server_pids(port) == []
        assert not (data_dir / "run" / "platform.json").exists()
        assert status(data_dir).returncode == 1
    finally:
        kill_leftovers(up, service_pids)
        log.close()
