"""`alnair up` killed with SIGKILL (no clean-up runs): its services and its nats-server must
not outlive it — each is armed with a parent-death signal (alnair_common.processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cli_support import ALNAIR, alive, nats_server_pids

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until


@pytest.mark.timeout(180)
def test_sigkill_of_up_takes_services_and_nats_down(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),
                           "--gpus", "sim:1x80"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        def ready() -> dict | None:
            assert up.poll() is None, f"alnair up exited {up.returncode}"
            done = subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir), "--json"],
                                  capture_output=True, text=True, timeout=30)
            return json.loads(done.stdout) if done.returncode == 0 else None

        report = wait_until(ready, timeout=120, interval=1.0, what="every service ready")
        pids = [int(s["pid"]) for s in report["services"]] + nats_server_pids(port)
        assert len(pids) == len(report["services"]) + 1 and all(alive(p) for p in pids)
        up.kill()
        up.wait(10)
        wait_until(lambda: not any(alive(p) for p in pids), timeout=30,
                   what="services and nats-server gone after SIGKILL of alnair up")
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
