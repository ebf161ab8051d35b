"""GPU run: the launch-signature path of training detection, scored against the truth.

Needs a real GPU, torch, and the interceptor built (``make -C native/cuda_intercept``).
Each workload of ``scripts/gpu/workloads.py`` runs under the interceptor (LD_PRELOAD, a
private ALNAIR_WORKSPACE) while this script reads the shared region every 0.5 s, exactly as
the exporter does, turns each active slot's launch signature into the report a CudaSample
carries (period = iteration_period_ns, repeats = iterations), and runs the profiler's
``detect`` over the reports. The truth is the workload's own iteration end times
(ALNAIR_TRUTH_FILE): true period = their median spacing.

    python services/profiler/bench/launch_period_gpu.py OUT_DIR [--seconds 20]

Writes OUT_DIR/launch_period.json and prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "services" / "profiler" / "src"))
sys.path.insert(0, str(REPO / "native" / "cuda_intercept" / "bench"))

from bench_common import child_env, region_module  # noqa: E402

from alnair_profiler._detection import LaunchReport, detect  # noqa: E402

SPECS = [
    ("cnn_train --batch 64", True), ("cnn_train --batch 256", True),
    ("transformer_train --batch 16 --width 256 --layers 2", True),
    ("transformer_train --batch 64 --width 512 --layers 6", True),
    ("mlp_train --batch 256", True), ("dataload_train --batch 128", True),
    ("inference_poisson --rate 20 --seed 1", False), ("irregular --seed 1", False), ("idle --hold-gib 1", False),
]


def run_one(spec: str, seconds: float) -> dict:
    regions = region_module()
    workspace = Path(tempfile.mkdtemp(prefix="alnair-prof-"))
    truth = workspace / "truth.txt"
    env = child_env(True, workspace, ALNAIR_VGPU_MEMORY_BYTES=str(60 << 30), ALNAIR_VGPU_COMPUTE_PERCENT="100")
    env["ALNAIR_TRUTH_FILE"] = str(truth)
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "gpu" / "workloads.py"), *shlex.split(spec),
                             "--seconds", str(seconds)], env=env)
    reports: list[LaunchReport] = []
    t0 = time.time()
    while proc.poll() is None:
        time.sleep(0.5)
        path = workspace / "cuda.region"
        if not path.exists():
            continue
        try:
            region = regions.read_region(path)
        except Exception as e:  # noqa: BLE001 - a busy region is retried next tick
            print(f"region read: {e}", file=sys.stderr)
            continue
        for slot in region.active():
            if slot.iteration_period_ns:
                reports.append(LaunchReport(time.time() - t0, slot.iteration_period_ns / 1e9, slot.iterations))
    ends = [float(x) for x in truth.read_text().split()] if truth.exists() else []
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    true_period = statistics.median(gaps) if gaps else 0.0
    d = detect(reports, [], [])
    error = abs(d.period_seconds - true_period) / true_period if d.period_seconds and true_period else None
    return {"spec": spec, "exit_code": proc.returncode, "reports": len(reports), "true_period_s": true_period,
            "detected_training": d.is_training, "period_s": d.period_seconds, "period_error": error,
            "confidence": d.confidence, "evidence": d.evidence, "reason": d.reason}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seconds", type=float, default=20.0)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec, label in SPECS:
        r = run_one(spec, a.seconds)
        r["label_training"] = label
        rows.append(r)
        print(json.dumps(r), flush=True)
    (a.out / "launch_period.json").write_text(json.dumps(rows, indent=2))
    correct = sum(r["detected_training"] == r["label_training"] for r in rows)
    errors = [r["period_error"] for r in rows if r["period_error"] is not None]
    print("| workload | label | detected | true period | launch period | error |\n|---|---|---|---|---|---|")
    for r in rows:
        err = f"{r['period_error']:.1%}" if r["period_error"] is not None else "-"
        print(f"| {r['spec']} | {'train' if r['label_training'] else 'other'} | "
              f"{'train' if r['detected_training'] else 'other'} | {r['true_period_s'] * 1e3:.2f} ms | "
              f"{r['period_s'] * 1e3:.2f} ms | {err} |")
    print(f"\naccuracy {correct}/{len(rows)}; median period error "
          f"{statistics.median(errors):.1%}" if errors else f"\naccuracy {correct}/{len(rows)}; no periods")
    print(f"(host: {os.uname().nodename})")


if __name__ == "__main__":
    main()
