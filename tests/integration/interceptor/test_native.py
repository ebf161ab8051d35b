"""The CUDA interceptor's C test suite, one pytest case per C case and build variant.

Each case runs the library preloaded into a small C program against the fake libcuda /
libnvidia-ml (CI has no GPU): lookup paths, exact memory limits per API and across
processes, lock-holder death, 64 threads and fork, limits precedence, throttling
convergence, launch signature. The same cases run under AddressSanitizer+UBSan and
ThreadSanitizer.
"""

from __future__ import annotations

import subprocess

import pytest
from interceptor_harness import NATIVE, VARIANTS, NativeBuild, c_cases

# Throttle cases measure convergence against the wall clock. On a machine where other work
# steals the CPU, a starved launcher thread shows up as a utilisation dip that belongs to the
# machine, not to the controller. They get up to two more tries; a wrong controller fails
# all three, and every failed try's output is kept in the assertion message.
REAL_TIME_CASES = ("throttle_", "share_", "gputime_")
TRIES = 3


@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", c_cases())
def test_c_case(native_build: NativeBuild, variant: str, case: str) -> None:
    tries = TRIES if case.startswith(REAL_TIME_CASES) else 1
    failures = []
    for attempt in range(tries):
        result = native_build.run_case(variant, case, again=attempt > 0)
        if result.returncode == 0 and f"PASS {case}" in result.stdout:
            return
        failures.append(f"{result.stdout}{result.stderr}")
    pytest.fail(f"{case} [{variant}] failed {len(failures)} of {tries} tries:\n" + "\n".join(failures))


@pytest.mark.timeout(300)
def test_release_library_exports_only_the_interposed_symbols(native_build: NativeBuild) -> None:
    result = native_build.make("lib", "check-exports")
    assert result.returncode == 0, result.stdout + result.stderr
    lib = native_build.root / "libalnair_cuda.so"
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    libs = sorted(line.split("[")[1].rstrip("]") for line in needed.splitlines() if "NEEDED" in line)
    assert set(libs) <= {"libc.so.6", "libdl.so.2", "libpthread.so.0"}, libs
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    names = {line.split()[-1] for line in symbols.splitlines()}
    for required in (
        "dlsym",
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuMemAlloc_v2",
        "cuLaunchKernelEx_ptsz",
        "cuGraphLaunch",
        "nvmlDeviceGetMemoryInfo_v2",
    ):
        assert required in names


def test_cases_file_lists_every_test_program() -> None:
    programs = {p.stem for p in (NATIVE / "tests").glob("test_*.c")}
    listed = set()
    for line in (NATIVE / "tests" / "cases.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            listed.add(line.split()[1])
    assert programs == listed
