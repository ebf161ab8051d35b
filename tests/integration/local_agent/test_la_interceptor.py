"""The environment the agent gives a workload is the one the interceptor acts on: a CUDA
program started by `alnair run` (on the fake driver, CI has no GPU) is held to the limits
the scheduler assigned, and its shared region says so."""

from __future__ import annotations

import json
from pathlib import Path

from la_support import run_cli

from alnair_common.cuda_region import read_region
from alnair_common.natsd import NatsServer

GIB = 1 << 30
CUDA_PROGRAM = """
import ctypes, json
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
ptr = ctypes.c_uint64()
too_big = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(3 << 30))
fits = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30))
print(json.dumps({"too_big": too_big, "fits": fits}))
"""


async def test_workload_is_held_to_its_assigned_limits(
        nats_server: NatsServer, agent, scheduler, tmp_path: Path,
        interceptor_build: Path) -> None:
    data_dir = tmp_path / "data"
    done = await run_cli(
        ["run", "--nats-url", nats_server.url, "--data-dir", str(data_dir), "--name", "cudaprog",
         "--gpu-memory", "2", "--gpu-compute", "30", "--", "python", "-c", CUDA_PROGRAM],
        env={"LD_LIBRARY_PATH": str(interceptor_build / "fake")})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"too_big": 2, "fits": 0}  # CUDA_ERROR_OUT_OF_MEMORY, then success

    [uid] = scheduler.bound
    region = read_region(data_dir / "workloads" / uid / "cuda.region")
    header = region.header
    assert (header.memory_limit_bytes, header.compute_percent) == (2 * GIB, 30)
    assert header.limits_source == "file" and header.workload_id == uid
    [slot] = [s for s in region.slots if s.devices[0].alloc_count or s.devices[0].alloc_denied]
    assert slot.devices[0].alloc_denied == 1 and slot.devices[0].memory_peak_bytes == GIB
