"""Benchmark 1 — interception overhead, no limits set: hooked vs native in the same run.

Workloads (each a child process; variants interleaved N,H,N,H,... to cancel drift):
  tiny    launch-bound loop of tiny kernels (x.add_(1) on one element)
  matmul  cuBLAS matmul loop (bf16 4096x4096, cuLaunchKernelEx path)
  train   small training step (4-layer MLP, AdamW, batch 256)
Reports median seconds per variant and the overhead in percent (goal <= 1 %).

    python overhead.py OUT_DIR            (worker mode: python overhead.py --worker NAME)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from bench_common import QUICK, child_env, md_table, run_json, write_result

SCALE = 0.1 if QUICK else 1.0


def worker(name: str) -> None:
    import torch

    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    if name == "tiny":
        x = torch.zeros(1, device=dev)
        n = int(200_000 * SCALE)
        for _ in range(1000):
            x.add_(1)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
    elif name == "matmul":
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        n = int(2000 * SCALE)
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            a @ b
        torch.cuda.synchronize()
    elif name == "train":
        model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())]).to(
            dev
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        data = torch.randn(256, 1024, device=dev)
        n = int(1000 * SCALE)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss = model(data).square().mean()
            loss.backward()
            opt.step()

        for _ in range(20):
            step()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    else:
        raise SystemExit(f"unknown workload {name}")
    print(json.dumps({"workload": name, "iterations": n, "seconds": time.perf_counter() - t}))


def main(out: Path) -> None:
    reps = 3 if QUICK else 5
    results: dict[str, dict[str, list[float]]] = {}
    rows = []
    for name in ("tiny", "matmul", "train"):
        results[name] = {"native": [], "hooked": []}
        try:
            for _ in range(reps):
                for variant in ("native", "hooked"):
                    r = run_json([sys.executable, __file__, "--worker", name], child_env(variant == "hooked"))
                    results[name][variant].append(r["seconds"])
            n, h = (statistics.median(results[name][v]) for v in ("native", "hooked"))
            rows.append([name, n, h, 100.0 * (h - n) / n, "pass" if h <= n * 1.01 else "over 1%"])
        except Exception as exc:  # noqa: BLE001 - keep the other workloads' results
            rows.append([name, "-", "-", "-", f"error: {str(exc)[-200:]}"])
    md = f"## 1. Overhead, no limits (median of {reps} interleaved runs)\n\n"
    md += md_table(["workload", "native s", "hooked s", "overhead %", "goal <= 1%"], rows)
    write_result(out, "1_overhead", results, md)
    print(md)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        main(Path(sys.argv[1]))
