"""Benchmark 4 — concurrent start-up of 20 hooked processes vs native (goal <= 1.2x).

Each process imports torch, creates its CUDA context, allocates and synchronises. All 20
start at once; the wall time until the last exits is measured, native and hooked
interleaved, 3 times each. Hooked processes share one workspace (one workload: they
contend for the same region, as the processes of one pod would).

    python startup.py OUT_DIR
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import QUICK, child_env, md_table, out_dir, write_result

N = 20
CODE = (
    "import torch; x = torch.ones(1 << 20, device='cuda'); torch.cuda.synchronize(); "
    "assert int(x.sum().item()) == 1 << 20"
)


def wave(hooked: bool) -> float:
    ws = Path(tempfile.mkdtemp(prefix="alnair-startup-"))
    env = child_env(hooked, ws, ALNAIR_VGPU_MEMORY_BYTES=str(16 << 30))
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CODE], env=env, stderr=subprocess.PIPE) for _ in range(N)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(err.decode()[-2000:])
    return time.perf_counter() - t


def main(out: Path) -> None:
    reps = 2 if QUICK else 3
    times: dict[str, list[float]] = {"native": [], "hooked": []}
    error = ""
    try:
        wave(False)  # warm the page cache
        for _ in range(reps):
            for v in ("native", "hooked"):
                times[v].append(wave(v == "hooked"))
    except Exception as exc:  # noqa: BLE001
        error = str(exc)
    rows = []
    if times["native"] and times["hooked"]:
        n, h = statistics.median(times["native"]), statistics.median(times["hooked"])
        rows.append([N, n, h, h / n, "pass" if h <= 1.2 * n else "over 1.2x"])
    md = f"## 4. Concurrent start-up of {N} processes (median of {reps})\n\n"
    md += md_table(["processes", "native s", "hooked s", "ratio", "goal <= 1.2x"], rows)
    if error:
        md += f"\n\nError: {error[-500:]}"
    write_result(out, "4_startup", {"times": times, "error": error}, md)
    print(md)


if __name__ == "__main__":
    main(out_dir(__doc__))
