"""The reaper records a workload's exit code the way a shell reports it."""

from __future__ import annotations

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


def test_usage_error_without_a_command(tmp_path: Path) -> None:
    done = subprocess.run([*REAPER, str(tmp_path / "x")], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and "usage:" in done.stderr
