"""The four workloads of the end-to-end sharing demonstration, and their CPU stand-ins.

``JOBS`` is the set ``e2e_share.py`` runs: each is a fixed amount of work (``--iterations``
of ``workloads.py``), sized so it takes roughly 15–25 s alone on an H200 (about half of it
Python, CUDA and cuDNN start-up) while leaving the GPU idle part of the time — small
batches, host-side data preparation, requests with pauses — so that sharing can pay off.
Sizes come from the H200 recordings in ``tests/data/gpu/h200`` (iteration times of the same
workloads, measured alone): cnn_train b64 3.8 ms at 65 % device utilisation, transformer
small 5.6 ms at 27 %, dataload b64 21 ms at 13 %, Poisson inference at a few %.

Run as a program, this module is the *stand-in* of ``workloads.py`` for ``e2e_share.py
--sim`` on a machine without a GPU: same command line, no torch; each iteration burns
``--busy-ms`` of CPU and sleeps ``--idle-ms``, and ``--alloc-gib`` above the limit the local
agent passes (``ALNAIR_VGPU_MEMORY_BYTES``) is "refused" the way the interceptor refuses it,
exiting with the same code. Everything it prints says it is a stand-in. With ``--hold-file``
it stays alive after its work (and its result line) until that file exists, at most
``--hold-max-s``: the demonstration's first shared round holds its four stand-ins so that its
`alnair ps` picture of all four running does not depend on how fast the machine is.

    python e2e_workloads.py cnn_train --batch 32 --iterations 20 --busy-ms 20 --idle-ms 60
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

OOM_EXIT = 42
"""Exit code of a workload whose ``--alloc-gib`` was refused (the same as ``workloads.py``)."""


@dataclass(frozen=True)
class Job:
    name: str
    workload: str
    options: tuple[str, ...]
    iterations: int
    memory_gib: int
    compute_percent: int
    sim_iterations: int
    sim_busy_ms: float
    sim_idle_ms: float
    oom_alloc_gib: float = 0.0
    """In the memory-isolation round this job asks for this much more than it may (0: never)."""

    def argv(self, python: str, *, sim: bool, scale: float = 1.0, alloc_gib: float = 0.0,
             hold_file: str = "") -> list[str]:
        """The command ``alnair run`` starts: workloads.py on a GPU, the stand-in with ``sim``
        (``hold_file``: the stand-in waits for it after its work)."""
        here = os.path.dirname(os.path.abspath(__file__))
        count = max(1, round((self.sim_iterations if sim else self.iterations) * scale))
        argv = [python, os.path.join(here, "e2e_workloads.py" if sim else "workloads.py"), self.workload,
                *self.options, "--iterations", str(count)]
        if sim:
            argv += ["--busy-ms", f"{self.sim_busy_ms:g}", "--idle-ms", f"{self.sim_idle_ms:g}"]
            if hold_file:
                argv += ["--hold-file", hold_file]
        if alloc_gib:
            argv += ["--alloc-gib", f"{alloc_gib:g}"]
        return argv


# Compute limits add up to 100 % of one GPU, memory to 28 GiB (of the H200's 140).
JOBS: tuple[Job, ...] = (
    Job("cnn", "cnn_train", ("--batch", "32"), iterations=2500, memory_gib=8, compute_percent=40,
        sim_iterations=30, sim_busy_ms=25, sim_idle_ms=55),
    Job("transformer", "transformer_train", ("--batch", "16", "--width", "256", "--layers", "2"),
        iterations=1600, memory_gib=8, compute_percent=30, sim_iterations=30, sim_busy_ms=15, sim_idle_ms=65),
    Job("inference", "inference_poisson", ("--rate", "25", "--seed", "3"), iterations=250, memory_gib=4,
        compute_percent=10, sim_iterations=30, sim_busy_ms=5, sim_idle_ms=75, oom_alloc_gib=6),
    Job("dataload", "dataload_train", ("--batch", "64"), iterations=450, memory_gib=8, compute_percent=20,
        sim_iterations=30, sim_busy_ms=50, sim_idle_ms=30),
)


def _refuse_or_grant(workload: str, gib: float) -> None:
    limit = os.environ.get("ALNAIR_VGPU_MEMORY_BYTES", "")
    if limit.isdigit() and gib * (1 << 30) > int(limit):
        print(f"E2E_OOM caught OutOfMemoryError allocating {gib:g} GiB (stand-in, no GPU: the limit "
              f"is {int(limit) / (1 << 30):g} GiB)", flush=True)
        sys.exit(OOM_EXIT)
    print(f"E2E_NO_OOM {workload}: {gib:g} GiB were granted (stand-in, no limit refused them)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description="CPU stand-in of workloads.py (no GPU, no torch)")
    p.add_argument("workload")
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--busy-ms", type=float, default=20.0)
    p.add_argument("--idle-ms", type=float, default=60.0)
    p.add_argument("--alloc-gib", type=float, default=0.0)
    p.add_argument("--hold-file", default="", help="after the work, stay alive until this file exists")
    p.add_argument("--hold-max-s", type=float, default=30.0, help="the longest --hold-file waits")
    a, _ = p.parse_known_args()  # workloads.py's own options (--batch …) mean nothing here
    started = time.time()
    if a.alloc_gib:
        _refuse_or_grant(a.workload, a.alloc_gib)
    first = last = None
    for _ in range(a.iterations):
        until = time.perf_counter() + a.busy_ms / 1e3
        while time.perf_counter() < until:
            sum(range(1000))
        time.sleep(a.idle_ms / 1e3)
        last = time.time()
        first = first or last
    work = (last - first) if first and last else 0.0
    print(f"{a.workload} (stand-in): {a.iterations} iterations in {time.time() - started:.1f} s", flush=True)
    print(f"E2E_RESULT workload={a.workload} iterations={a.iterations} seconds={time.time() - started:.3f} "
          f"work_seconds={work:.3f} stand_in=1", flush=True)
    if a.hold_file:
        deadline = time.monotonic() + a.hold_max_s
        while not os.path.exists(a.hold_file) and time.monotonic() < deadline:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
