"""Whether `alnair up` loads the interceptor: on by default where real GPUs are found.

A newcomer on a GPU workstation expects the limits they ask for (`alnair run --gpu-memory 8`)
to hold. So where NVML finds a GPU, `alnair up` loads ``libalnair_cuda.so`` into every
workload without being told: the one ``--interceptor`` names (or ``ALNAIR_INTERCEPTOR_LIB``),
else the one ``scripts/up`` built (``native/cuda_intercept/build``, or ``ALNAIR_CUDA_BUILD_DIR``),
else the Kubernetes install path. If none exists it refuses to start rather than run without
limits silently; running without them is ``--no-interceptor``, said loudly at start.

With a simulated inventory (``--gpus sim:…``) or no GPU there is nothing to limit: nothing is
loaded unless ``--interceptor`` asks, as before.

The GPU probe calls NVML through ctypes (``nvmlInit_v2``, ``nvmlDeviceGetCount_v2``): two
symbols every driver has, so the test suite's fake ``libnvidia-ml.so.1`` answers it too.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alnair_common import ConfigError

LIB_NAME = "libalnair_cuda.so"
_NATIVE = Path(__file__).resolve().parents[4] / "native" / "cuda_intercept"
INSTALLED = Path("/opt/alnair/lib") / LIB_NAME  # where the device plugin's init container puts it
BUILD_HINT = "build it with `make -C native/cuda_intercept lib` (scripts/up does when a C compiler exists)"


def nvml_gpu_count(library: str = "libnvidia-ml.so.1") -> int:
    """GPUs NVML reports; 0 without a driver (no library, init fails, or no device)."""
    try:
        nvml = ctypes.CDLL(library)
        init, count = nvml.nvmlInit_v2, nvml.nvmlDeviceGetCount_v2
    except (OSError, AttributeError):
        return 0
    if init() != 0:
        return 0
    n = ctypes.c_uint(0)
    try:
        return n.value if count(ctypes.byref(n)) == 0 else 0
    finally:
        shutdown = getattr(nvml, "nvmlShutdown", None)
        if shutdown is not None:
            shutdown()


def default_candidates() -> list[Path]:
    """Where a built or installed interceptor is looked for, in order."""
    build = os.environ.get("ALNAIR_CUDA_BUILD_DIR")
    found = [Path(build) if Path(build).is_absolute() else _NATIVE / build] if build else []
    return [*(d / LIB_NAME for d in found), _NATIVE / "build" / LIB_NAME, INSTALLED]


@dataclass(frozen=True)
class InterceptorChoice:
    library: Path | None
    notice: str  # what `alnair up` says at start
    loud: bool = False  # limits asked for will not be enforced on real GPUs


def choose_interceptor(gpus: str | None, interceptor: Path | None, no_interceptor: bool, *,
                       gpu_count: Callable[[], int] = nvml_gpu_count,
                       candidates: Sequence[Path] | None = None) -> InterceptorChoice:
    """The library to preload into workloads (None: none), and what to tell the user."""
    if interceptor is not None and no_interceptor:
        raise ConfigError("--interceptor and --no-interceptor contradict each other; give one")
    if interceptor is not None:
        if not interceptor.is_file():
            raise ConfigError(f"--interceptor {interceptor}: no such file; {BUILD_HINT}")
        return InterceptorChoice(interceptor.resolve(), f"GPU limits enforced by {interceptor.resolve()}")
    if gpus is not None:
        return InterceptorChoice(None, "simulated GPUs: no interceptor loaded (nothing real to limit)")
    count = gpu_count()
    if count == 0:
        return InterceptorChoice(None, "no GPU found through NVML: no interceptor loaded")
    if no_interceptor:
        return InterceptorChoice(None, f"--no-interceptor: {count} GPU(s) found but GPU LIMITS ARE NOT "
                                 "ENFORCED — workloads may use any memory and compute of their card",
                                 loud=True)
    looked = list(candidates if candidates is not None else default_candidates())
    for path in looked:
        if path.is_file():
            return InterceptorChoice(path.resolve(), f"{count} GPU(s) found: limits enforced by {path.resolve()}")
    raise ConfigError(
        f"{count} GPU(s) found through NVML but no {LIB_NAME} to enforce limits (looked in "
        f"{', '.join(str(p) for p in looked)}); {BUILD_HINT}, pass --interceptor PATH, or run "
        "without limits with --no-interceptor")
