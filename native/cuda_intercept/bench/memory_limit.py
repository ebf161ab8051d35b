"""Benchmark 3 — the memory limit under PyTorch's allocators.

For the default caching allocator, PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync and
expandable_segments:True, a hooked worker with ALNAIR_VGPU_MEMORY_BYTES=LIMIT checks:
  torch.cuda.mem_get_info() reports total == LIMIT;
  allocating 256 MiB blocks until torch.cuda.OutOfMemoryError is raised (and caught);
  the process continues (frees one block, allocates and computes again);
  zero bytes over the limit: torch's peak reserved memory and the process's NVML memory
  (pynvml, includes the CUDA context, reported separately) against LIMIT.

    python memory_limit.py OUT_DIR     (worker: python memory_limit.py --worker)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bench_common import child_env, md_table, out_dir, run_json, write_result

LIMIT = 8 << 30
CONFIGS = {
    "default": "",
    "cudaMallocAsync": "backend:cudaMallocAsync",
    "expandable_segments": "expandable_segments:True",
}


def nvml_process_bytes() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory or 0)
    except Exception:  # noqa: BLE001 - optional / pid namespace
        return None
    return None


def worker() -> None:
    import torch

    free, total = torch.cuda.mem_get_info()
    blocks, oom, err = [], False, ""
    try:
        while len(blocks) < 1000:
            blocks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as exc:
        oom, err = True, str(exc).splitlines()[0][:200]
    allocated = len(blocks) * (256 << 20)
    peak_reserved = torch.cuda.max_memory_reserved()
    nvml_used = nvml_process_bytes()
    continued = False
    if len(blocks) >= 4:
        del blocks[-4:]  # give back 1 GiB, then compute again
        x = torch.ones(1 << 20, device="cuda")
        continued = float(x.sum().item()) == float(1 << 20)
    print(
        json.dumps(
            {
                "total": total,
                "free": free,
                "oom": oom,
                "error": err,
                "allocated": allocated,
                "peak_reserved": peak_reserved,
                "nvml_process_bytes": nvml_used,
                "continued": continued,
            }
        )
    )


def main(out: Path) -> None:
    rows, data = [], {}
    for name, conf in CONFIGS.items():
        env = child_env(True, ALNAIR_VGPU_MEMORY_BYTES=str(LIMIT))
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        else:
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        try:
            r = run_json([sys.executable, __file__, "--worker"], env)
            data[name] = r
            over = max(0, r["peak_reserved"] - LIMIT)
            rows.append(
                [
                    name,
                    r["total"] == LIMIT,
                    r["oom"],
                    r["continued"],
                    r["allocated"] / 2**30,
                    r["peak_reserved"] / 2**30,
                    over,
                    "-" if r["nvml_process_bytes"] is None else r["nvml_process_bytes"] / 2**30,
                ]
            )
        except Exception as exc:  # noqa: BLE001 - keep the other allocators' results
            data[name] = {"error": str(exc)}
            rows.append([name, "error", str(exc)[-150:], "", "", "", "", ""])
    md = f"## 3. Memory limit ({LIMIT / 2**30:.0f} GiB) under PyTorch allocators\n\n"
    md += md_table(
        [
            "allocator",
            "mem_get_info total == limit",
            "OOM raised",
            "process continued",
            "allocated GiB",
            "peak reserved GiB",
            "bytes over limit",
            "NVML process GiB (incl. context)",
        ],
        rows,
    )
    write_result(out, "3_memory_limit", data, md)
    print(md)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--worker":
        worker()
    else:
        main(out_dir(__doc__))
