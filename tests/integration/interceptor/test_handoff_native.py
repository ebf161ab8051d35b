"""What :mod:`alnair_common.cuda_handoff` writes is what the interceptor's real C parser
(``ci_limits.c``) reads: a process on the fake libcuda, given a rendered limits file (or
only the hand-off's environment), records exactly those limits in its region and enforces
them. A zero amount must come back as "no limit", never as "refuse everything"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from interceptor_harness import NativeBuild

from alnair_common.cuda_handoff import CudaShare, interceptor_env, write_limits
from alnair_common.cuda_region import FILE_NAME, read_region

GIB = 1 << 30
TRY_BYTES = 3 * GIB  # over the 2 GiB case's limit, well under the fake card's 16 GiB
CUDA_ERROR_OUT_OF_MEMORY = 2
PROGRAM = f"""
import ctypes, json
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
ptr = ctypes.c_uint64()
print(json.dumps(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t({TRY_BYTES}))))
"""
SHARES = [CudaShare("ml/train-0", "GPU-handoff-0", memory_gib=m, compute_percent=c)
          for m, c in ((2, 30), (0, 30), (8, 0), (0, 0))]


@pytest.fixture(scope="module")
def preload(native_build: NativeBuild) -> tuple[Path, Path]:
    """The release library and the directory of the fake driver."""
    root = native_build.root
    done = native_build.make("lib", f"{root}/fake/libcuda.so.1", f"{root}/fake/libnvidia-ml.so.1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root / "libalnair_cuda.so", root / "fake"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("source", ["file", "env"])
@pytest.mark.parametrize("share", SHARES, ids=lambda s: f"mem{s.memory_gib}-compute{s.compute_percent}")
def test_interceptor_reads_back_the_handed_off_limits(preload: tuple[Path, Path], tmp_path: Path,
                                                      share: CudaShare, source: str) -> None:
    lib, fake = preload
    if source == "file":
        write_limits(tmp_path, share)
    env = {"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(fake),
           **interceptor_env(share, workspace=str(tmp_path), interceptor=str(lib))}
    done = subprocess.run([sys.executable, "-I", "-c", PROGRAM], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "invalid" not in done.stderr, done.stderr  # the parser found nothing to be strict about

    header = read_region(tmp_path / FILE_NAME).header
    assert header.memory_limit_bytes == (share.memory_bytes or None)
    assert header.compute_percent == (share.compute_percent or 100)
    assert header.workload_id == share.workload_id
    given = share.memory_gib or share.compute_percent
    assert header.limits_source == (source if source == "file" or given else "none")
    refused = share.memory_gib and TRY_BYTES > share.memory_bytes
    assert json.loads(done.stdout) == (CUDA_ERROR_OUT_OF_MEMORY if refused else 0)
