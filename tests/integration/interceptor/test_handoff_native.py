"""What :mod:`alnair_common.cuda_handoff` writes is what the interceptor's real C parser
(``ci_limits.c``) reads: a process on the fake libcuda, given a rendered limits file (or
only the hand-off's environment), records exactly those limits in its region and enforces
them. A zero amount must come back as "no limit", never as "refuse everything". In MPS mode
the driver reads the limits' MPS client settings, whatever the tenant set."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
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


MPS_VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                 "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
MPS_PROGRAM = f"""
import ctypes, json
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
seen, buf = {{}}, ctypes.create_string_buffer(256)
for name in {MPS_VARIABLES!r}:  # what the (fake) driver's cuInit read
    rc = cuda.fakecuda_env_seen(b"cuInit", name.encode(), buf, ctypes.c_size_t(256))
    seen[name] = buf.value.decode() if rc == 1 else None
ptr = ctypes.c_uint64()
print(json.dumps([seen, cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t({TRY_BYTES}))]))
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("tenant_percent", "threads"), [(None, "30"), ("10", "10"), ("100", "30")])
def test_interceptor_sets_the_handed_off_mps_settings(preload: tuple[Path, Path], tmp_path: Path,
                                                      tenant_percent: str | None, threads: str) -> None:
    """MPS mode from a rendered file: the driver's cuInit reads the limits' MPS settings, not
    the tenant's; its ALNAIR_VGPU_COMPUTE_PERCENT still tightens (never loosens) the SM
    partition; the memory limit stays the interceptor's; a daemon's socket in the pipe
    directory means nothing to complain about."""
    lib, fake = preload
    pipe = Path(tempfile.mkdtemp(prefix="alnair-mps-", dir="/tmp"))  # a socket's path stays short
    daemon = socket.socket(socket.AF_UNIX)
    try:
        daemon.bind(str(pipe / "control"))
        share = CudaShare("ml/train-0", "GPU-handoff-0", memory_gib=2, compute_percent=30,
                          mps_pipe_directory=str(pipe))
        write_limits(tmp_path, share)
        tenant = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/tenant-mps", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
                  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=64G"}
        if tenant_percent is not None:
            tenant["ALNAIR_VGPU_COMPUTE_PERCENT"] = tenant_percent
        env = {"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(fake),
               **interceptor_env(share, workspace=str(tmp_path), interceptor=str(lib)), **tenant}
        done = subprocess.run([sys.executable, "-I", "-c", MPS_PROGRAM], env=env, capture_output=True,
                              text=True, timeout=60)
    finally:
        daemon.close()
        (pipe / "control").unlink(missing_ok=True)
        pipe.rmdir()
    assert done.returncode == 0, done.stderr
    assert "invalid" not in done.stderr and "no MPS control daemon" not in done.stderr, done.stderr
    seen, allocated = json.loads(done.stdout)
    assert seen == {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": threads,
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M"}
    assert allocated == CUDA_ERROR_OUT_OF_MEMORY  # 3 GiB over the 2 GiB limit: the interceptor's
    header = read_region(tmp_path / FILE_NAME).header
    assert header.compute_percent == int(threads) and header.memory_limit_bytes == 2 * GIB
