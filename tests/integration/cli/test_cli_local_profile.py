"""A local workload with no GPU process (a CPU stage, on a simulated card) still gets a profile
with host series: `alnair up`, `alnair run` of a CPU-bound program, then `alnair profile`; and
one that ends within one sampling period has host figures from what its reaper counted."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cli_support import ALNAIR

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 4: pass\n"
# ~0.2 s: 80 MiB touched page by page, then CPU until 0.1 s of it is spent
SHORT = ("import time\nb = bytearray(80 << 20)\nb[::4096] = b'x' * len(b[::4096])\n"
         "t = time.process_time()\nwhile time.process_time() - t < 0.1: pass\n")


@pytest.mark.timeout(300)
async def test_a_cpu_only_local_workload_has_host_series_in_its_profile(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    env = {**os.environ, "COLUMNS": "200", "ALNAIR_HOST_PERIOD_SECONDS": "1"}
    log_path = tmp_path / "up.log"
    log = open(log_path, "wb")  # noqa: ASYNC230 - the console of `alnair up`
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),  # noqa: ASYNC220
                           "--gpus", "sim:1x8"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def ready() -> bool:
            if up.poll() is not None:
                raise AssertionError(f"alnair up exited {up.returncode}: {log_path.read_text()[-3000:]}")
            return subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir), "--json"],
                                  capture_output=True, text=True, timeout=30).returncode == 0

        await asyncio.to_thread(wait_until, ready, timeout=150, interval=1.0, what="every service ready")
        run = await asyncio.to_thread(subprocess.run, [
            *ALNAIR, "run", "--data-dir", str(data_dir), "--name", "cpu-stage", "--gpu-memory", "1",
            "--", "python", "-c", BUSY], capture_output=True, text=True, timeout=120, env=env)
        assert run.returncode == 0, run.stderr

        def profiled(name: str = "cpu-stage") -> dict | None:
            done = subprocess.run([*ALNAIR, "profile", name, "--data-dir", str(data_dir), "--json"],
                                  capture_output=True, text=True, timeout=30)
            return json.loads(done.stdout) if done.returncode == 0 else None

        found = await asyncio.to_thread(wait_until, profiled, timeout=60, interval=1.0, what="the profile")
        short = await asyncio.to_thread(subprocess.run, [
            *ALNAIR, "run", "--data-dir", str(data_dir), "--name", "short-stage", "--gpu-memory", "1",
            "--", "python", "-c", SHORT], capture_output=True, text=True, timeout=120, env=env)
        assert short.returncode == 0, short.stderr
        brief = await asyncio.to_thread(wait_until, lambda: profiled("short-stage"), timeout=60, interval=1.0,
                                        what="the short workload's profile")
        shown = await asyncio.to_thread(subprocess.run, [*ALNAIR, "profile", "short-stage", "--data-dir",
                                                         str(data_dir)], capture_output=True, text=True,
                                        timeout=30, env=env)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        log.close()
    [record] = found["workloads"]
    series = record["series"]
    assert series["cpu_cores"]["samples"] > 0 and series["cpu_cores"]["max"] > 0.3, series["cpu_cores"]
    assert series["memory_bytes"]["max"] > 1 << 20, series["memory_bytes"]
    assert series["gpu_utilization_ratio"]["samples"] == 0  # no GPU process: host series only
    [record] = brief["workloads"]
    usage, series = record["usage"], record["series"]
    assert usage["cpu_user_seconds"] + usage["cpu_system_seconds"] >= 0.1, usage
    assert usage["max_rss_bytes"] >= 80 << 20, usage
    # ended before a second host sample: its maxima come from the totals
    assert series["memory_bytes"]["max"] >= 80 << 20, series["memory_bytes"]
    assert series["cpu_cores"]["max"] > 0, series["cpu_cores"]
    assert "used in all" in shown.stdout and "peak memory of one process" in shown.stdout, shown.stdout
