"""Benchmark 1 — interception overhead, no limits set: hooked vs native in the same run.

Workloads (timed one after another in each child process; native and hooked children alternate):
  tiny    launch-bound loop of tiny kernels (x.add_(1) on one element)
  matmul  cuBLAS matmul loop (bf16 4096x4096, cuLaunchKernelEx path)
  train   small training step (4-layer MLP, AdamW, batch 256)
Reports median seconds per variant and the overhead in percent (goal <= 1 %).

    python overhead.py OUT_DIR            (worker mode: python overhead.py --worker NAME...)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from bench_common import QUICK, child_env, md_table, out_dir, run_json, write_result

SCALE = 0.1 if QUICK else 1.0


def worker(names: list[str]) -> None:
    """Times each named workload in this one process; prints {name: seconds}."""
    import torch

    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    seconds = {}
    for name in names:
        run = _workload(name, torch, dev)
        run(max(1, int(20 * SCALE)))  # warm-up: kernels loaded, cuBLAS handles made
        torch.cuda.synchronize()
        t = time.perf_counter()
        run(ITERATIONS[name])
        torch.cuda.synchronize()
        seconds[name] = time.perf_counter() - t
    print(json.dumps(seconds))


ITERATIONS = {"tiny": int(200_000 * SCALE), "matmul": int(2000 * SCALE), "train": int(1000 * SCALE)}


def _workload(name: str, torch, dev):  # type: ignore[no-untyped-def]
    """A function running `n` iterations of the named workload."""
    if name == "tiny":
        x = torch.zeros(1, device=dev)

        def tiny(n: int) -> None:
            for _ in range(n):
                x.add_(1)

        return tiny
    if name == "matmul":
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

        def matmul(n: int) -> None:
            for _ in range(n):
                a @ b

        return matmul
    if name == "train":
        layers = [m for _ in range(4) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())]
        model = torch.nn.Sequential(*layers).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        data = torch.randn(256, 1024, device=dev)

        def train(n: int) -> None:
            for _ in range(n):
                opt.zero_grad(set_to_none=True)
                model(data).square().mean().backward()
                opt.step()

        return train
    raise SystemExit(f"unknown workload {name}")


def main(out: Path) -> None:
    """Native and hooked processes alternate; each times every workload once. The table is
    rewritten after every pair, so a run cut short still leaves its results."""
    reps = 3 if QUICK else 7
    names = list(ITERATIONS)
    results: dict[str, dict[str, list[float]]] = {n: {"native": [], "hooked": []} for n in names}
    errors: list[str] = []
    for rep in range(reps):
        for variant in ("native", "hooked") if rep % 2 == 0 else ("hooked", "native"):
            try:
                r = run_json([sys.executable, __file__, "--worker", *names], child_env(variant == "hooked"))
                for name in names:
                    results[name][variant].append(r[name])
            except Exception as exc:  # noqa: BLE001 - keep the other runs' results
                errors.append(f"{variant} run {rep}: {str(exc)[-300:]}")
        _report(out, results, errors)


def _report(out: Path, results: dict[str, dict[str, list[float]]], errors: list[str]) -> None:
    rows = []
    for name, r in results.items():
        if not r["native"] or not r["hooked"]:
            continue
        n, h = statistics.median(r["native"]), statistics.median(r["hooked"])
        per_launch = ""
        if name == "tiny":
            per_launch = f"{(h - n) / ITERATIONS[name] * 1e9:.0f} ns/launch"
        rows.append([name, len(r["native"]), n, h, 100.0 * (h - n) / n, per_launch,
                     "pass" if h <= n * 1.01 else "over 1%"])
    md = "## 1. Overhead, no limits (median of interleaved runs; native and hooked alternate)\n\n"
    md += md_table(["workload", "runs", "native s", "hooked s", "overhead %", "", "goal <= 1%"], rows)
    if errors:
        md += "\n\nErrors:\n" + "\n".join(f"- {e}" for e in errors)
    write_result(out, "1_overhead", results, md)
    print(md, flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
    else:
        main(out_dir(__doc__))
