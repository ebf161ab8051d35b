"""Issue 19 §4 on the H200: does a memory limit hold as nvidia-smi counts it?

    make -s -C native/cuda_intercept BUILD_DIR=/tmp/b lib
    python3 scripts/gpu/issue19_footprint.py --lib /tmp/b/libalnair_cuda.so --out "$OUT"

For PyTorch, CuPy and JAX, each in a child process of its own with the interceptor preloaded
and a 4 GiB limit (ALNAIR_VGPU_MEMORY_BYTES, a fresh workspace each): allocate until refused,
in 256 MiB chunks, then 32 MiB, then 2 MiB (JAX without its preallocated pool, so that every
array is an allocation), and hold it. This process (no interceptor) then reads the child's
real device usage from NVML (nvmlDeviceGetComputeRunningProcesses: its used memory, what
nvidia-smi shows) and what the interceptor charged it (its region slot: memory_used_bytes,
footprint_bytes). Prints and writes (OUT/issue19_footprint.json) one JSON record per
framework: limit, NVML's used bytes, ratio = used / limit (goal: at most 1.01), held bytes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LIMIT = 4 << 30
CHUNKS = (256 << 20, 32 << 20, 2 << 20)
HEADER, SLOT, DEVICE_AT = 512, 64 + 16 * 128, 64  # ci_region_layout.h, layout 3


def fill(framework: str, keep: list) -> dict:
    """Child: allocates until refused at each chunk size, into `keep` (which holds it)."""
    held, refused, info = 0, None, lambda: None
    if framework == "torch":
        import torch

        def alloc(n: int):
            return torch.empty(n, dtype=torch.uint8, device="cuda")

        oom: type[BaseException] = torch.OutOfMemoryError
        info = torch.cuda.mem_get_info
    elif framework == "cupy":
        import cupy

        def alloc(n: int):
            return cupy.empty(n, dtype=cupy.uint8)

        oom = cupy.cuda.memory.OutOfMemoryError
        info = cupy.cuda.runtime.memGetInfo
    else:
        import jax.numpy as jnp

        def alloc(n: int):
            return jnp.zeros(n, dtype=jnp.uint8).block_until_ready()

        oom = Exception  # XlaRuntimeError: RESOURCE_EXHAUSTED
    for chunk in CHUNKS:
        while held < 2 * LIMIT:
            try:
                keep.append(alloc(chunk))
                held += chunk
            except oom as e:  # noqa: PERF203
                refused = str(e).splitlines()[0][:160]
                break
    return {"held_bytes": held, "refused": refused, "mem_get_info": info()}


def nvml_used(pid: int) -> int | None:
    """Used device memory of `pid` on GPU 0 as NVML reports it (None: not listed)."""

    class Info(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]

    nv = ctypes.CDLL("libnvidia-ml.so.1")
    dev, count, infos = ctypes.c_void_p(), ctypes.c_uint(256), (Info * 256)()
    assert nv.nvmlInit_v2() == 0 and nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
    assert nv.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), infos) == 0
    return next((infos[i].used for i in range(count.value) if infos[i].pid == pid), None)


def charged(workspace: str, pid: int) -> dict:
    """The child's device-0 record in its region: what the interceptor charged it."""
    data = Path(workspace, "cuda.region").read_bytes()

    def u(at: int, n: int = 8) -> int:
        return int.from_bytes(data[at : at + n], "little")

    for off in range(HEADER, HEADER + 128 * SLOT, SLOT):
        if u(off + 4, 4) == 1 and u(off + 8, 4) == pid:  # state active, pid
            dev = off + DEVICE_AT
            return {"charged_bytes": u(dev), "footprint_bytes": u(dev + 112)}
    return {}


def measure(framework: str, lib: str) -> dict:
    ws = tempfile.mkdtemp(prefix=f"alnair-fp-{framework}-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env.update(LD_PRELOAD=lib, ALNAIR_WORKSPACE=ws, ALNAIR_VGPU_MEMORY_BYTES=str(LIMIT), PYTHONUNBUFFERED="1")
    env.update(XLA_PYTHON_CLIENT_PREALLOCATE="false", XLA_PYTHON_CLIENT_ALLOCATOR="platform")
    cmd = [sys.executable, __file__, "--child", framework]
    child = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()  # printed once it holds everything it could get
        if not line.startswith("{"):
            return {"framework": framework, "error": f"child exit {child.wait(timeout=30)}"}
        record = {"framework": framework, "limit_bytes": LIMIT, **json.loads(line)}
        used = nvml_used(child.pid)
        record.update(nvml_used_bytes=used, ratio=None if used is None else round(used / LIMIT, 4))
        record.update(over_bytes=None if used is None else used - LIMIT)
        record.update(charged(ws, child.pid))
        return record
    finally:
        child.stdin.close()
        child.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="libalnair_cuda.so (make -C native/cuda_intercept lib)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="torch,cupy,jax")
    a = ap.parse_args()
    results = []
    for framework in a.only.split(","):
        results.append(measure(framework, os.path.abspath(a.lib)))
        print(json.dumps(results[-1]), flush=True)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "issue19_footprint.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        arrays: list = []
        print(json.dumps(fill(sys.argv[2], arrays)), flush=True)
        sys.stdin.read()  # hold them until the parent has read NVML
    else:
        main()
