"""`alnair up` killed with SIGKILL (no clean-up runs): its services and its nats-server must
not outlive it — each is armed with a parent-death signal (alnair_common.processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cli_support import ALNAIR, alive, kill_leftovers, nats_server_pids

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until


def _start_up(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),
                             "--gpus", "sim:1x80"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait_ready(up: subprocess.Popen[bytes], data_dir: Path, port: int) -> dict[int, str]:
    """Every service ready; the pid of each, and of the nats-server, by name."""
    def ready() -> dict | None:
        assert up.poll() is None, f"alnair up exited {up.returncode}"
        done = subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir), "--json"],
                              capture_output=True, text=True, timeout=30)
        return json.loads(done.stdout) if done.returncode == 0 else None

    report = wait_until(ready, timeout=120, interval=1.0, what="every service ready")
    names = {int(s["pid"]): s["name"] for s in report["services"]}
    names.update({pid: "nats-server" for pid in nats_server_pids(port)})
    assert len(names) == len(report["services"]) + 1 and all(alive(p) for p in names)
    return names


def _kill_up_and_expect_all_gone(up: subprocess.Popen[bytes], names: dict[int, str],
                                 data_dir: Path) -> None:
    up.kill()
    up.wait(10)
    try:
        wait_until(lambda: not any(alive(p) for p in names), timeout=30,
                   what="services and nats-server gone after SIGKILL of alnair up")
    except TimeoutError as e:
        left = [names[p] for p in names if alive(p)]
        logs = {n: (data_dir / "logs" / f"{n}.log").read_text()[-1500:] for n in left
                if (data_dir / "logs" / f"{n}.log").exists()}
        raise AssertionError(f"still running: {left}; their logs' ends: {logs}") from e


@pytest.mark.timeout(180)
def test_sigkill_of_up_takes_services_and_nats_down(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    up = _start_up(data_dir, port)
    pids: list[int] = []
    try:
        names = _wait_ready(up, data_dir, port)
        pids = list(names)
        _kill_up_and_expect_all_gone(up, names, data_dir)
    finally:
        kill_leftovers(up, pids)


@pytest.mark.timeout(240)
def test_sigkill_of_up_takes_a_restarted_nats_server_down(tmp_path: Path) -> None:
    """The nats-server `alnair up` starts again after it died is armed like the first one
    (it was started from a worker thread, where no parent-death signal can be armed)."""
    data_dir, port = tmp_path / "alnair", free_port()
    up = _start_up(data_dir, port)
    pids: list[int] = []
    try:
        first = _wait_ready(up, data_dir, port)
        pids = list(first)
        (old,) = (p for p, n in first.items() if n == "nats-server")
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: [p for p in nats_server_pids(port) if p != old] or None,
                   timeout=60, what="nats-server started again")
        names = _wait_ready(up, data_dir, port)
        pids += list(names)
        _kill_up_and_expect_all_gone(up, names, data_dir)
    finally:
        kill_leftovers(up, pids)
