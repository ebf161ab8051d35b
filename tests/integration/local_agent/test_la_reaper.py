"""The reaper records a workload's exit code the way a shell reports it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from alnair_local_agent._launcher import REAPER as REAPER_FILE

REAPER = [sys.executable, "-I", "-S", str(REAPER_FILE)]


@pytest.mark.parametrize(("command", "code"), [
    (["python", "-c", "import sys; sys.exit(7)"], 7),
    (["python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 128 + 15),
    (["/nonexistent/program"], 127),
])
def test_exit_code_is_recorded(tmp_path: Path, command: list[str], code: int) -> None:
    exit_file = tmp_path / "exit_code"
    done = subprocess.run([*REAPER, str(exit_file), "--", *command], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == code
    assert exit_file.read_text() == f"{code}\n"


def test_what_the_processes_used_is_recorded_beside_the_exit_code(tmp_path: Path) -> None:
    """CPU time and peak memory of the command and of a child it waited for, as getrusage
    counts them; written before the exit code, so an agent that reads the code finds both."""
    work = ("import subprocess, sys, time\n"
            "subprocess.run([sys.executable, '-c', 'b = bytearray(96 << 20); b[::4096] = b\"x\" * len(b[::4096])'])\n"
            "t = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\n")
    exit_file = tmp_path / "exit_code"
    done = subprocess.run([*REAPER, str(exit_file), "--", sys.executable, "-c", work], timeout=60)
    assert done.returncode == 0 and exit_file.read_text() == "0\n"
    usage = json.loads((tmp_path / "usage.json").read_text())
    assert usage["cpu_user_seconds"] + usage["cpu_system_seconds"] >= 0.3
    assert usage["max_rss_bytes"] >= 96 << 20  # the grandchild's bytearray, touched page by page
    assert usage["disk_read_bytes"] >= 0 and usage["disk_write_bytes"] >= 0


def test_usage_error_without_a_command(tmp_path: Path) -> None:
    done = subprocess.run([*REAPER, str(tmp_path / "x")], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and "usage:" in done.stderr
