"""Limits on by default where a GPU exists: `alnair up` on a machine where NVML finds a GPU
loads the interceptor without being told, and `alnair run`'s limit holds.

CI has no GPU: the GPU is the fake driver native/cuda_intercept builds (libnvidia-ml.so.1 and
libcuda.so.1 on LD_LIBRARY_PATH), the only fake allowed. The fake NVML answers the probe
`alnair up` makes (nvmlInit_v2, nvmlDeviceGetCount_v2) but not everything the local agent's
inventory reads (UUIDs, names), so the agent is given a one-card inventory through its own
setting (ALNAIR_GPUS in the environment, not an `alnair up` flag).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import ALNAIR

from alnair_cli._interceptor import choose_interceptor, nvml_gpu_count
from alnair_common import ConfigError
from alnair_common.natsd import free_port
from alnair_common.testing import wait_until

REPO = Path(__file__).resolve().parents[3]
CUDA_PROGRAM = """
import ctypes, json
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
ptr = ctypes.c_uint64()
too_big = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(3 << 30))
fits = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30))
print(json.dumps({"too_big": too_big, "fits": fits}))
"""


@pytest.fixture(scope="module")
def fake_gpu_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interceptor and the fake driver, built by the Makefile's own targets."""
    build = tmp_path_factory.mktemp("cuda-intercept")
    done = subprocess.run(["make", "-C", str(REPO / "native" / "cuda_intercept"), f"BUILD_DIR={build}", "lib",
                           f"{build}/fake/libcuda.so.1", f"{build}/fake/libnvidia-ml.so.1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return build


def probe_in_a_child(library: str) -> int:
    """nvml_gpu_count in its own process: loading the fake driver into the test process would
    leave its libcuda.so.1 there for every later test that asks for the real one."""
    done = subprocess.run([sys.executable, "-c", "import sys; from alnair_cli._interceptor import "
                           "nvml_gpu_count; print(nvml_gpu_count(sys.argv[1]))", library],
                          capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout.strip())


def test_the_choice_follows_the_gpus_nvml_finds(fake_gpu_build: Path, tmp_path: Path) -> None:
    fake_nvml = str(fake_gpu_build / "fake" / "libnvidia-ml.so.1")
    gpus = probe_in_a_child(fake_nvml)
    assert gpus >= 1
    assert nvml_gpu_count(str(tmp_path / "no-such-libnvidia-ml.so.1")) == 0
    lib = fake_gpu_build / "libalnair_cuda.so"

    def found() -> int:
        return gpus

    on = choose_interceptor(None, None, False, gpu_count=found, candidates=[tmp_path / "absent.so", lib])
    assert on.library == lib.resolve() and not on.loud and "limits enforced" in on.notice
    with pytest.raises(ConfigError, match="--no-interceptor") as refused:
        choose_interceptor(None, None, False, gpu_count=found, candidates=[tmp_path / "absent.so"])
    assert "make -C native/cuda_intercept lib" in str(refused.value)
    off = choose_interceptor(None, None, True, gpu_count=found, candidates=[lib])
    assert off.library is None and off.loud and "NOT ENFORCED" in off.notice
    # Simulated GPUs and machines without a GPU: unchanged, nothing loaded unless asked.
    assert choose_interceptor("sim:2x80", None, False, gpu_count=found, candidates=[lib]).library is None
    assert choose_interceptor(None, None, False, gpu_count=lambda: 0, candidates=[lib]).library is None
    assert choose_interceptor("sim:2x80", lib, False, gpu_count=found).library == lib.resolve()
    with pytest.raises(ConfigError, match="contradict"):
        choose_interceptor(None, lib, True, gpu_count=found)


async def _up_then_run(argv: list[str], env: dict[str, str], tmp_path: Path) -> tuple[str, dict[str, int], str]:
    """Start the platform with ``argv`` (+ its data dir and port), run the CUDA program under a
    2 GiB limit; the console of `up`, the program's result and `alnair run`'s stderr."""
    data_dir, port = tmp_path / "alnair", free_port()
    log_path = tmp_path / "up.log"
    log = open(log_path, "wb")  # noqa: ASYNC230 - the console of `alnair up`
    up = subprocess.Popen([*argv, "--data-dir", str(data_dir), "--port", str(port)],  # noqa: ASYNC220
                          stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def ready() -> bool:
            if up.poll() is not None:
                raise AssertionError(f"{argv} exited {up.returncode}: {log_path.read_text()[-3000:]}")
            done = subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir), "--json"],
                                  capture_output=True, text=True, timeout=30, env=env)
            return done.returncode == 0

        await asyncio.to_thread(wait_until, ready, timeout=180, interval=1.0, what="every service ready")
        run = await asyncio.to_thread(subprocess.run, [
            *ALNAIR, "run", "--data-dir", str(data_dir), "--name", "cudaprog", "--gpu-memory", "2",
            "--gpu-compute", "30", "--", "python", "-c", CUDA_PROGRAM],
            capture_output=True, text=True, timeout=120, env=env)
        assert run.returncode == 0, run.stderr
        return (" ".join(log_path.read_text().split()),  # rich wraps long lines
                json.loads(run.stdout.strip().splitlines()[-1]), run.stderr)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        log.close()


def _gpu_machine_env(fake_gpu_build: Path, interceptor_build_dir: Path) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200", "LD_LIBRARY_PATH": str(fake_gpu_build / "fake"),
           "ALNAIR_CUDA_BUILD_DIR": str(interceptor_build_dir), "ALNAIR_GPUS": "sim:1x8"}
    env.pop("ALNAIR_INTERCEPTOR_LIB", None)
    return env


@pytest.mark.timeout(240)
@pytest.mark.parametrize("flags", [[], ["--no-interceptor"]], ids=["default", "no-interceptor"])
async def test_up_on_a_gpu_machine_enforces_a_limit_without_flags(fake_gpu_build: Path, tmp_path: Path,
                                                                  flags: list[str]) -> None:
    """By default the 3 GiB allocation is refused under the 2 GiB limit; with --no-interceptor
    (said loudly at start) the same program gets it."""
    console, result, run_stderr = await _up_then_run(
        [*ALNAIR, "up", *flags], _gpu_machine_env(fake_gpu_build, fake_gpu_build), tmp_path)
    if flags:
        assert "WARNING: --no-interceptor" in console and "LIMITS ARE NOT ENFORCED" in console
        assert result == {"too_big": 0, "fits": 0}  # nothing held it to its 2 GiB
    else:
        assert f"limits enforced by {(fake_gpu_build / 'libalnair_cuda.so').resolve()}" in console
        assert "not enforced" not in run_stderr.lower()
        assert result == {"too_big": 2, "fits": 0}  # CUDA_ERROR_OUT_OF_MEMORY, then success


@pytest.mark.timeout(400)
async def test_scripts_up_builds_the_interceptor_and_enforces_limits(fake_gpu_build: Path, tmp_path: Path) -> None:
    """What a newcomer runs: scripts/up finds the (fake) GPU, builds the interceptor (here into
    an empty build directory), and the platform it starts holds the workload to its limit."""
    build = tmp_path / "fresh-build"
    console, result, _ = await _up_then_run(
        [str(REPO / "scripts" / "up")], _gpu_machine_env(fake_gpu_build, build), tmp_path)
    assert (build / "libalnair_cuda.so").is_file()
    assert "building the interceptor" in console
    assert f"limits enforced by {(build / 'libalnair_cuda.so').resolve()}" in console
    assert result == {"too_big": 2, "fits": 0}
