"""GPU probe (issue #24 §1): do kernel names tell a training loop from inference?

NVML's series cannot tell steady batched inference from a steady training (both a flat
plateau; docs/benchmarks.md, "Family-held-out"), and neither can the launch signature (both
repeat one kernel sequence on a clock). A training step launches kernels an inference pass
never does: autograd's backward kernels, cuDNN's data/weight-gradient convolutions, the
optimizer's multi-tensor updates. This probe runs one variant of each corpus family
(``detect_corpus.py``) for a few seconds under ``torch.profiler`` (CUPTI) and counts, per
family, how many of its kernel launches have names matching each pattern below — evidence
for (or against) classifying kernels by name in the interceptor (``cuFuncGetName``).

    python3 kernel_names_probe.py --out DIR [--seconds 4] [--parallel 4]

Writes DIR/kernel_names.json (one object per family) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shlex
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATTERNS = ("backward", "Backward", "bwd", "wgrad", "dgrad", "bprop", "multi_tensor_apply", "foreach",
            "adam", "Adam", "sgd", "SGD", "grad")


def _child(script: str, argv: list[str], out: Path) -> None:
    """In the child: run the workload as __main__ under the profiler, then count names."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.argv = [str(HERE / script), *argv]
    sys.path.insert(0, str(HERE))
    # No GPU (a dry run of this script): the CPU operators' names stand in for kernels.
    gpu = torch.cuda.is_available()
    kind = torch.autograd.DeviceType.CUDA if gpu else torch.autograd.DeviceType.CPU
    with profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:
        try:
            runpy.run_path(str(HERE / script), run_name="__main__")
        except SystemExit:
            pass
    names: Counter[str] = Counter()
    for e in prof.events():
        if getattr(e, "device_type", None) == kind and "memcpy" not in e.name.lower() \
                and "memset" not in e.name.lower():
            names[e.name] += 1
    out.write_text(json.dumps({"kernels": dict(names)}))


def probe(entry, seconds: float, out_dir: Path) -> dict:  # type: ignore[no-untyped-def]
    argv = shlex.split(entry.args)
    if entry.script == "opendata_workloads.py":
        argv += ["--max-work-seconds", str(seconds)]
    else:
        argv += ["--seconds", str(seconds)]
    raw = out_dir / f"{entry.name}.kernels.json"
    t = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", entry.script, str(raw), "--", *argv],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    row = {"name": entry.name, "family": entry.family, "is_training": entry.is_training,
           "exit_code": proc.returncode, "seconds": round(time.time() - t, 1)}
    if proc.returncode != 0 or not raw.exists():
        row["error"] = proc.stderr[-1500:]
        return row
    names = json.loads(raw.read_text())["kernels"]
    total = sum(names.values())
    row.update(launches=total, distinct=len(names))
    row["by_pattern"] = {p: sum(n for k, n in names.items() if p in k) for p in PATTERNS}
    row["top"] = sorted(names.items(), key=lambda kv: -kv[1])[:12]
    row["matched_examples"] = sorted((k for k in names if any(p in k for p in PATTERNS)), key=len)[:8]
    return row


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        script, out = sys.argv[2], Path(sys.argv[3])
        _child(script, sys.argv[5:], out)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--parallel", type=int, default=4)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    from detect_corpus import _entries  # noqa: PLC0415

    first = {}
    for e in _entries():
        first.setdefault(e.family, e)  # one variant per family
    with ThreadPoolExecutor(a.parallel) as pool:
        rows = list(pool.map(lambda e: probe(e, a.seconds, a.out), first.values()))
    (a.out / "kernel_names.json").write_text(json.dumps(rows, indent=1))
    print("| family | label | launches | " + " | ".join(PATTERNS) + " |")
    for r in rows:
        if "error" in r:
            print(f"| {r['family']} | error {r['exit_code']}: {r['error'][-200:]!r} |")
            continue
        share = " | ".join(f"{r['by_pattern'][q] / max(1, r['launches']):.3f}" for q in PATTERNS)
        print(f"| {r['family']} | {'train' if r['is_training'] else 'other'} | {r['launches']} | {share} |")


if __name__ == "__main__":
    main()
