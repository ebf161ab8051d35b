"""What the `alnair up` tests share: the command, and finding its processes in /proc."""

from __future__ import annotations

import sys
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
