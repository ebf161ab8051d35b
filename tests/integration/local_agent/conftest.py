"""Fixtures of the local-agent tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from la_support import REPO, RunningAgent, StandInScheduler, start_agent

from alnair_common import Bus
from alnair_common.natsd import NatsServer
from alnair_local_agent._workspace import still_running


@pytest.fixture(scope="session")
def interceptor_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """native/cuda_intercept built for these tests: the library and the fake driver (the
    only fake allowed: CI has no GPU)."""
    build = tmp_path_factory.mktemp("cuda-intercept")
    done = subprocess.run(["make", "-C", str(REPO / "native" / "cuda_intercept"),
                           f"BUILD_DIR={build}", "lib", f"{build}/fake/libcuda.so.1",
                           f"{build}/fake/libnvidia-ml.so.1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return build


@pytest.fixture(scope="session")
def interceptor_lib(interceptor_build: Path) -> Path:
    return interceptor_build / "libalnair_cuda.so"


@pytest.fixture
async def agent(nats_server: NatsServer, tmp_path: Path,
                interceptor_lib: Path) -> AsyncIterator[RunningAgent]:
    running = await start_agent(nats_server.url, tmp_path / "data", interceptor=interceptor_lib)
    try:
        yield running
    finally:
        if not running.task.done():
            await running.stop()
        kill_leftover_workloads(tmp_path / "data")


def kill_leftover_workloads(data_dir: Path) -> None:
    """Workloads outlive agents by design; a failed test must not leave them behind."""
    for pid_file in data_dir.glob("workloads/*/pid"):
        pid, started = pid_file.read_text().split()
        if still_running(int(pid), started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)


@pytest.fixture
async def scheduler(bus: Bus) -> StandInScheduler:
    stand_in = StandInScheduler(bus)
    await stand_in.start()
    return stand_in
