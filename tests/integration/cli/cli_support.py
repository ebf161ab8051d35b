"""What the `alnair up` tests share: the command, and finding its processes in /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ALNAIR = [sys.executable, "-m", "alnair_cli"]


def _state(pid: int | str) -> str | None:
    """The process's state letter, None when it does not exist."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    return _state(pid) not in (None, "Z")


def nats_server_pids(port: int) -> list[int]:
    """Live nats-server processes started for ``port`` (alnair names them alnair-<port>)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"nats-server") and f"alnair-{port}".encode() in argv \
                and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_leftovers(up: subprocess.Popen, pids: list[int]) -> None:
    """A test's clean-up whatever it got to: `alnair up` killed if still running, then every
    service or nats-server pid it recorded that is still alive."""
    if up.poll() is None:
        up.kill()
        up.wait()
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def running_platform(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                     timeout: float = 150) -> Iterator[Path]:
    """`alnair up` as a user runs it (its own data dir and port, ``args`` added) until every
    service is ready; the data directory. Stopped with SIGINT on the way out."""
    from alnair_common.natsd import free_port
    from alnair_common.testing import wait_until

    data_dir, log_path = tmp_path / "alnair", tmp_path / "up.log"
    with open(log_path, "wb") as log:
        up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(free_port()),
                               *args], stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "COLUMNS": "200", **(env or {})})
    try:
        def ready() -> bool:
            if up.poll() is not None:
                raise AssertionError(f"alnair up exited {up.returncode}: {log_path.read_text()[-3000:]}")
            return subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir), "--json"],
                                  capture_output=True, text=True, timeout=30).returncode == 0

        wait_until(ready, timeout=timeout, interval=1.0, what="every service ready")
        yield data_dir
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
