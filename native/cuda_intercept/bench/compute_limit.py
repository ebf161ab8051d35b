"""Benchmark 2 — compute-limit accuracy.

One workload at targets 10/30/50/70/90 %, then co-located pairs 30/70 and 10/90 (each in its
own workspace, i.e. its own workload). The workload is a continuous bf16 matmul loop that
would saturate the GPU. Measured over the steady state (after a settling time):
  achieved SM utilisation (pynvml per-process smUtil, else whole-device via nvidia-smi),
  throughput (matmuls/s) against the unthrottled throughput measured first,
  throughput attainment = throughput / (target/100 * unthrottled).
Goals: MAE <= 2 percentage points, attainment >= 95 %.

    python compute_limit.py OUT_DIR     (worker: python compute_limit.py --worker SECONDS)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import QUICK, UtilSampler, child_env, md_table, out_dir, write_result

RUN_S = 12.0 if QUICK else 40.0
SETTLE_S = 4.0 if QUICK else 10.0


def worker(seconds: float) -> None:
    import torch

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    marks = []
    start = time.time()
    n = 0
    while time.time() - start < seconds:
        for _ in range(20):
            a @ b
        n += 20
        torch.cuda.synchronize()
        marks.append((time.time(), n))
    print(json.dumps({"marks": marks}))


def steady_rate(marks: list[list[float]], t0: float, t1: float) -> float:
    inside = [m for m in marks if t0 <= m[0] <= t1]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def run_group(targets: list[int | None], sampler: UtilSampler) -> list[dict]:
    """Starts one worker per target at once (None = native); returns per-worker results."""
    procs = []
    for target in targets:
        env = child_env(target is not None, ALNAIR_VGPU_COMPUTE_PERCENT=str(target or 100))
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(RUN_S)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    started = time.time()
    results = []
    for target, p in zip(targets, procs, strict=True):
        out, err = p.communicate(timeout=RUN_S + 300)
        if p.returncode != 0:
            raise RuntimeError(f"worker (target {target}) failed: {err[-2000:]}")
        marks = json.loads(out.strip().splitlines()[-1])["marks"]
        t0, t1 = marks[0][0] + SETTLE_S, marks[-1][0]
        results.append(
            {
                "target": target,
                "pid": p.pid,
                "rate": steady_rate(marks, t0, t1),
                "util": sampler.mean(p.pid, t0, t1),
                "device_util": sampler.mean(None, t0, t1),
                "window": [t0, t1],
                "started": started,
            }
        )
    return results


def main(out: Path) -> None:
    sampler = UtilSampler().start()
    data: dict = {"util_source": sampler.source, "single": [], "pairs": []}
    rows, pair_rows, errors = [], [], []
    try:
        base = run_group([None], sampler)[0]
        data["unthrottled"] = base
        full = base["rate"]
        singles = () if os.environ.get("BENCH_PAIRS_ONLY") else (10, 30, 50, 70, 90)
        for target in singles:
            try:
                r = run_group([target], sampler)[0]
                util = r["util"] if r["util"] is not None else r["device_util"]
                attain = r["rate"] / (target / 100 * full)
                data["single"].append(r)
                rows.append(
                    [
                        target,
                        util,
                        abs(util - target) if util is not None else "-",
                        r["rate"],
                        100 * r["rate"] / full,
                        100 * attain,
                    ]
                )
            except Exception as exc:  # noqa: BLE001
                errors.append(f"target {target}: {exc}")
        for pair in ((30, 70), (10, 90)):
            try:
                rs = run_group(list(pair), sampler)
                data["pairs"].append(rs)
                total = sum(r["rate"] for r in rs)
                for r in rs:
                    share = 100 * r["rate"] / full
                    pair_rows.append(
                        [
                            f"{pair[0]}/{pair[1]}",
                            r["target"],
                            share,
                            share - r["target"],
                            "yes" if share <= r["target"] + 2 else "NO",
                            r["util"] if r["util"] is not None else "-",
                            100 * total / full,
                        ]
                    )
            except Exception as exc:  # noqa: BLE001
                errors.append(f"pair {pair}: {exc}")
    except Exception as exc:  # noqa: BLE001
        errors.append(f"unthrottled baseline: {exc}")
    finally:
        sampler.stop()
    errs = [r[2] for r in rows if isinstance(r[2], float)]
    md = "## 2. Compute-limit accuracy\n\n"
    md += (
        f"Utilisation source: {sampler.source}; run {RUN_S:.0f} s, settle {SETTLE_S:.0f} s; "
        f"unthrottled {data.get('unthrottled', {}).get('rate', float('nan')):.1f} matmul/s.\n\n"
    )
    md += md_table(["target %", "achieved util %", "abs error", "matmul/s", "% of unthrottled", "attainment %"], rows)
    if errs:
        md += f"\n\nSingle-tenant MAE: **{statistics.fmean(errs):.2f} pp** (goal <= 2)\n"
    md += (
        "\n\nCo-located pairs. True share = the worker's throughput / the unthrottled throughput alone "
        "(its kernels take the same GPU time either way). NVML's per-process smUtil is shown to make the "
        "point that it is not a share on a time-sliced GPU. Two contexts that both have work lose time "
        "to context switching, so the pair together gets less than the whole GPU (last column).\n\n"
    )
    md += md_table(
        ["pair", "limit %", "true share %", "share - limit", "within limit", "NVML smUtil %", "pair total %"],
        pair_rows,
    )
    if errors:
        md += "\n\nErrors:\n" + "\n".join(f"- {e}" for e in errors)
    write_result(out, "2_compute_limit", data, md)
    print(md)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(float(sys.argv[2]))
    else:
        main(out_dir(__doc__))
