"""Disk used by the local platform's data directory as `alnair run … -- true` repeats.

Starts `alnair up --gpus sim:1x80` in a temporary data directory with the local agent's
retention set to keep ``--keep`` finished workloads (checked every second), runs ``--runs``
workloads one after another and prints the data directory's size every ``--every`` runs.
With retention the size levels off once the kept workloads are reached; the growth of the
first and the last block of runs is compared in one invocation.

    .venv/bin/python scripts/bench/disk_per_run.py [--runs 120] [--every 20] [--keep 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alnair_common.natsd import free_port

ALNAIR = [sys.executable, "-m", "alnair_cli"]


def size_of(path: Path) -> int:
    """Bytes allocated on disk (what `du` counts), the store's preallocated files included."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=120)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--keep", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir, port = Path(tmp) / "alnair", free_port()
        env = {**os.environ, "ALNAIR_KEEP_FINISHED": str(args.keep),
               "ALNAIR_RETENTION_CHECK_SECONDS": "1"}
        up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),
                               "--gpus", "sim:1x80"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir)],
                                 capture_output=True).returncode != 0:
                if time.monotonic() > deadline or up.poll() is not None:
                    raise SystemExit("alnair up did not become ready")
                time.sleep(1)
            sizes = [(0, size_of(data_dir))]
            for i in range(1, args.runs + 1):
                done = subprocess.run([*ALNAIR, "run", "--data-dir", str(data_dir), "--gpu-memory",
                                       "1", "--", "true"], capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"run {i} failed: {done.stderr[-500:]}")
                if i % args.every == 0:
                    time.sleep(2)  # let the retention round of the last runs happen
                    sizes.append((i, size_of(data_dir)))
                    parts = {p.name: size_of(p) // 1024 for p in sorted(data_dir.iterdir()) if p.is_dir()}
                    print(f"after {i:>4} runs: {sizes[-1][1] / 1024:.0f} KiB {parts}", flush=True)
            first = (sizes[1][1] - sizes[0][1]) / args.every
            last = (sizes[-1][1] - sizes[-2][1]) / args.every
            print(f"growth per run: first {args.every} runs {first / 1024:.1f} KiB, "
                  f"last {args.every} runs {last / 1024:.1f} KiB (keep {args.keep})")
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(60)


if __name__ == "__main__":
    main()
