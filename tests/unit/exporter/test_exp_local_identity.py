"""Local mode without the interceptor: a GPU process is attributed to the workload whose
reaper (recorded by the local agent in ``<workspace>/pid``) is its ancestor — real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from alnair_exporter import ChainResolver, StaticResolver, WorkspacePidResolver

# a "reaper" that starts the workload's command as its child and waits
REAPER = "import subprocess,sys; c=subprocess.Popen([sys.executable,'-c','import sys; sys.stdin.read()']," \
         "stdin=sys.stdin); print(c.pid, flush=True); c.wait()"


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]


def test_the_reapers_descendants_belong_to_its_workload(tmp_path: Path) -> None:
    reaper = subprocess.Popen([sys.executable, "-c", REAPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reaper.stdout is not None
        child = int(reaper.stdout.readline())
        (tmp_path / "uid-local").mkdir()
        (tmp_path / "uid-local" / "pid").write_text(f"{reaper.pid} {_start_time(reaper.pid)}\n")
        (tmp_path / "uid-stale").mkdir()
        (tmp_path / "uid-stale" / "pid").write_text(f"{reaper.pid} 1\n")  # same PID, another start: reused
        (tmp_path / "uid-junk").mkdir()
        (tmp_path / "uid-junk" / "pid").write_text("not a pid file")
        resolver = WorkspacePidResolver(tmp_path)
        assert resolver.workload_uid(child) == "uid-local"
        assert resolver.workload_uid(reaper.pid) == "uid-local"
        assert resolver.workload_uid(os.getpid()) is None  # the test itself belongs to no workload
        assert resolver.workload_uid(2**22 + 7) is None  # no such process
        assert ChainResolver(StaticResolver({}), resolver).workload_uid(child) == "uid-local"
    finally:
        assert reaper.stdin is not None and reaper.stdout is not None
        reaper.stdin.close()  # the workload's command reads stdin: it ends too
        reaper.kill()
        reaper.wait()
        reaper.stdout.close()
