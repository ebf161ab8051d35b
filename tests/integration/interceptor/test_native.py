"""The CUDA interceptor's C test suite, one pytest case per C case and build variant.

Each case runs the library preloaded into a small C program against the fake libcuda /
libnvidia-ml (CI has no GPU): lookup paths, exact memory limits per API and across
processes, lock-holder death, 64 threads and fork, limits precedence, throttling
convergence (on virtual time), launch signature. The same cases run under AddressSanitizer+UBSan and
ThreadSanitizer.
"""

from __future__ import annotations

import subprocess

import pytest
from interceptor_harness import NATIVE, VARIANTS, NativeBuild, c_cases

# The throttle, share and sampling cases run on the fake driver's virtual clock
# (tests/fake/fake_clock.c), so the machine's load cannot change what they measure: one
# try each. throttle_realtime_smoke is the one case on the real clock, with loose bounds.


@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", c_cases())
def test_c_case(native_build: NativeBuild, variant: str, case: str) -> None:
    result = native_build.run_case(variant, case)
    passed = result.returncode == 0 and f"PASS {case}" in result.stdout
    assert passed, f"{case} [{variant}]:\n{result.stdout}{result.stderr}"


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


@pytest.mark.timeout(300)
def test_launch_microbenchmark_builds_and_runs(native_build: NativeBuild) -> None:
    """bench/launch_bench.c (the numbers in docs/benchmarks.md) still builds and runs: a short
    run, every limit mode and call in the table, no timing asserted (CI machines are noisy)."""
    result = native_build.make("bench-launch", "BENCH_SCALE=0.01")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "ns" not in line]
    seen = {(cells[0], cells[1]) for cells in ([c.strip() for c in row.strip("|").split("|")] for row in rows)}
    for mode in ("none", "memory", "compute"):
        for call in ("cuLaunchKernel", "cuMemAlloc+cuMemFree", "cuGetProcAddress_v2"):
            assert (mode, call) in seen, result.stdout
