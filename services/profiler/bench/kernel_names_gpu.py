"""GPU run: training detection from the interceptor's kernel names, one run of each corpus family.

Each family's first variant (``scripts/gpu/detect_corpus.py``) runs alone under the
interceptor (no limit, a private workspace) for ``--seconds`` of work; the region is read
every 0.5 s as the exporter reads it, and at the end its totals become the reports the
profiler gets: ``KernelNameReport`` per device (kernel launches, launches of training-named
kernels, names readable, PyTorch seen) and the launch signature's ``LaunchReport``. Then
``detect`` — kernel names first, then the signature (no NVML series here) — is scored
against the family's label. Several families run at once (``--parallel``): names and launch
counts do not depend on a neighbour, unlike NVML's utilisation.

    python services/profiler/bench/kernel_names_gpu.py OUT_DIR [--seconds 6] [--parallel 4]

Writes OUT_DIR/kernel_names_gpu.json and prints a markdown table. ``--seconds`` counts from each
workload's start for the ``corpus_workloads.py`` families (model set-up and CUDA's start
included: give them 15 s), from the first step for the others.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "services" / "profiler" / "src"))
sys.path.insert(0, str(REPO / "native" / "cuda_intercept" / "bench"))
sys.path.insert(0, str(REPO / "scripts" / "gpu"))

from bench_common import child_env, region_module  # noqa: E402

from alnair_profiler._detection import KernelNameReport, LaunchReport, detect  # noqa: E402


def run_one(entry, seconds: float) -> dict:  # type: ignore[no-untyped-def]
    regions = region_module()
    ws = Path(tempfile.mkdtemp(prefix="alnair-kn-"))
    env = child_env(True, ws, ALNAIR_VGPU_MEMORY_BYTES=str(60 << 30), ALNAIR_VGPU_COMPUTE_PERCENT="100")
    argv = shlex.split(entry.args)
    argv += (["--max-work-seconds", str(seconds)] if entry.script == "opendata_workloads.py"
             else ["--seconds", str(seconds)])
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "gpu" / entry.script), *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    launches: list[LaunchReport] = []
    t0 = time.time()
    region = None
    while True:
        done = proc.poll() is not None
        try:
            region = regions.read_region(ws / "cuda.region")
        except Exception:  # noqa: BLE001 - not there yet, or caught mid-update: next tick
            pass
        if region is not None:
            for slot in region.active():
                if slot.iteration_period_ns:
                    launches.append(LaunchReport(time.time() - t0, slot.iteration_period_ns / 1e9, slot.iterations))
        if done:
            break
        time.sleep(0.5)
    err = proc.stderr.read() if proc.stderr else ""
    names: list[KernelNameReport] = []
    totals = {"kernel_launches": 0, "training_launches": 0, "names_read": False, "torch_seen": False}
    if region is not None:
        devices: dict[int, list] = {}
        for slot in region.slots:
            for i, d in slot.active_devices().items():
                devices.setdefault(i, []).append(d)
        for i, recs in devices.items():
            r = KernelNameReport(entry.name, time.time() - t0, f"gpu{i}",
                                 sum(d.kernel_launches + d.graph_launches for d in recs),
                                 sum(d.training_kernel_launches for d in recs),
                                 any(d.kernel_names_read for d in recs), any(d.torch_kernels_seen for d in recs))
            names.append(r)
            totals["kernel_launches"] += r.kernel_launches
            totals["training_launches"] += r.training_launches
            totals["names_read"] |= r.names_read
            totals["torch_seen"] |= r.torch_seen
    d = detect(launches, [], [], kernel_names=names)
    by_signature = detect(launches, [], [])
    return {"name": entry.name, "family": entry.family, "label_training": entry.is_training,
            "exit_code": proc.returncode, **totals, "detected_training": d.is_training, "evidence": d.evidence,
            "reason": d.reason, "signature_alone_training": by_signature.is_training,
            "signature_evidence": by_signature.evidence, "stderr_tail": err[-400:] if proc.returncode else ""}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--families", default="", help="comma-separated: only these (default: every family)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    from detect_corpus import _entries  # noqa: PLC0415

    first: dict[str, object] = {}
    wanted = {f for f in a.families.split(",") if f}
    for e in _entries():
        if not wanted or e.family in wanted:
            first.setdefault(e.family, e)
    with ThreadPoolExecutor(a.parallel) as pool:
        rows = list(pool.map(lambda e: run_one(e, a.seconds), first.values()))
    (a.out / "kernel_names_gpu.json").write_text(json.dumps(rows, indent=2))
    print("| family | label | kernel launches | training-named | PyTorch seen | kernel names + signature | "
          "signature alone |\n|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (not r["label_training"], r["family"])):
        def verdict(t: bool, ev: str) -> str:
            return f"{'train' if t else 'other'} ({ev or 'none'})"
        print(f"| {r['family']} | {'train' if r['label_training'] else 'other'} | {r['kernel_launches']} | "
              f"{r['training_launches']} | {'yes' if r['torch_seen'] else 'no'} | "
              f"{verdict(r['detected_training'], r['evidence'])} | "
              f"{verdict(r['signature_alone_training'], r['signature_evidence'])} |")
    names_ok = sum(r["detected_training"] == r["label_training"] for r in rows)
    sig_ok = sum(r["signature_alone_training"] == r["label_training"] for r in rows)
    print(f"\nkernel names first: {names_ok}/{len(rows)} right; signature alone: {sig_ok}/{len(rows)}; "
          f"names read in {sum(r['names_read'] for r in rows)}/{len(rows)}")


if __name__ == "__main__":
    main()
