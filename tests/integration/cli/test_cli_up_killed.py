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
        names = {int(s["pid"]): s["name"] for s in report["services"]}
        names.update({pid: "nats-server" for pid in nats_server_pids(port)})
        pids = list(names)
        assert len(pids) == len(report["services"]) + 1 and all(alive(p) for p in pids)
        up.kill()
        up.wait(10)
        try:
            wait_until(lambda: not any(alive(p) for p in pids), timeout=30,
                       what="services and nats-server gone after SIGKILL of alnair up")
        except TimeoutError as e:
            left = [names[p] for p in pids if alive(p)]
            logs = {n: (data_dir / "logs" / f"{n}.log").read_text()[-1500:] for n in left
                    if (data_dir / "logs" / f"{n}.log").exists()}
            raise AssertionError(f"still running: {left}; their logs' ends: {logs}") from e
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
