"""Child processes of the end-to-end run (``e2e_share.py``): start them tied to this process,
stop them, find any that outlived their parent. Standard library only, Linux /proc.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGTERM): a child outlives no SIGKILLed orchestrator (this
    script spawns from its one thread only, so a pre-exec function is safe here)."""
    _LIBC.prctl(1, signal.SIGTERM)


def terminate(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``grace`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line or environment contains ``text``."""
    found, needle = [], text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes() or needle in (entry / "environ").read_bytes():
                if alive(int(entry.name)):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def ancestors() -> set[int]:
    """This process and its parents up to init."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p for p in pids if alive(p)]
        if not pids:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
