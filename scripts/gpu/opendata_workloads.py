"""The open dataset's workloads (issue #20): six classes of real PyTorch work, fixed work each.

Each run does ``--iterations`` steps (or requests) of one class, with fixed seeds and all data
generated here (nothing downloaded), so two runs of one configuration do the same work and
their resource use can be compared across limits and co-runners:

==================  ==================================================================  =====
class               what one iteration is                                               data
==================  ==================================================================  =====
``cnn_train``       ResNet-style CNN (basic residual blocks) training step (--image)    GPU
``lm_train``        causal transformer language model training step (next token)        GPU
``batch_infer``     the same CNN in inference mode over one full batch                   GPU
``poisson_infer``   one request: Poisson arrivals at ``--rate``/s, batch 1..``--batch``  GPU
``dataload_train``  small CNN step fed by a DataLoader whose workers augment on the CPU  CPU
``gnn_train``       graph network (mean-aggregation message passing) training step       GPU
==================  ==================================================================  =====

Parameters: ``--batch``, ``--width`` (model size), ``--layers``, ``--precision fp32|bf16``
(autocast), ``--workers`` (DataLoader workers), ``--rate`` (requests/s). ``--device cpu``
runs any of them on the CPU at the sizes given (the recorder's ``--sim`` passes tiny ones).

What the recorder reads: ``--pid-file`` gets this process's pid before torch is imported
(the recorder samples the process tree's CPU, RSS and I/O from /proc); ``--truth-file`` gets
the wall-clock end of every iteration (throughput and iteration period per second); the last
line printed is ``OPENDATA_RESULT key=value ...`` (iterations done, setup and work seconds,
the allocator's peak bytes). ``--max-work-seconds`` stops a run whose iterations take far
longer than planned (the recorder's guard for its time budget).

    python opendata_workloads.py cnn_train --iterations 800 --batch 64 --precision bf16
    python opendata_workloads.py dataload_train --device cpu --iterations 5 --batch 4 --workers 2
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

RESULT_PREFIX = "OPENDATA_RESULT"
CLASSES = ("cnn_train", "lm_train", "batch_infer", "poisson_infer", "dataload_train", "gnn_train")
TRAINING = {"cnn_train": True, "lm_train": True, "batch_infer": False, "poisson_infer": False,
            "dataload_train": True, "gnn_train": True}
"""Ground truth for the profiler's training detection: does the class run a training loop?"""


def options(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=CLASSES)
    p.add_argument("--iterations", type=int, required=True, help="fixed work: this many steps or requests")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=64, help="channels (CNN), model width (LM), hidden size (GNN)")
    p.add_argument("--layers", type=int, default=2, help="blocks per stage (CNN), layers (LM, GNN)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (dataload_train)")
    p.add_argument("--rate", type=float, default=100.0, help="requests per second (poisson_infer)")
    p.add_argument("--image", type=int, default=64, help="image side, pixels")
    p.add_argument("--seq", type=int, default=256, help="tokens per sequence (lm_train)")
    p.add_argument("--nodes", type=int, default=50_000, help="graph nodes (gnn_train); edges are 10x")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-work-seconds", type=float, default=0.0,
                   help="stop after this much work even if --iterations are not done (0: never); a guard "
                        "for a recording's time budget: the result line says how many were done")
    p.add_argument("--pid-file", help="write this process's pid here first")
    p.add_argument("--truth-file", help="append each iteration's end time (epoch seconds) here")
    a = p.parse_args(argv)
    for name in ("iterations", "batch", "width", "layers", "image", "seq", "nodes"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.workers < 0 or a.rate <= 0:
        p.error("--workers must be >= 0 and --rate > 0")
    return a


def main(argv: list[str] | None = None) -> None:
    a = options(argv)
    if a.pid_file:
        with open(a.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    began = time.time()
    import torch  # after the pid file: the recorder watches the import too
    from opendata_models import build

    random.seed(a.seed)
    torch.manual_seed(a.seed)
    if a.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("opendata_workloads: --device cuda but torch sees no GPU (use --device cpu)")
        torch.backends.cudnn.benchmark = False  # autotuning would be seconds of a ~5 s run's start
    step = build(a)
    truth = open(a.truth_file, "a", buffering=1) if a.truth_file else None  # noqa: SIM115
    setup = time.time() - began
    first = last = None
    done = 0
    for i in range(a.iterations):
        step(i)
        last = time.time()
        first = first or last
        done += 1
        if truth:
            truth.write(f"{last:.6f}\n")
        if a.max_work_seconds and last - first > a.max_work_seconds:
            break
    peak = torch.cuda.max_memory_allocated() if a.device == "cuda" else 0
    work = (last - first) if first and last else 0.0
    print(f"{RESULT_PREFIX} workload={a.workload} iterations={done} setup_seconds={setup:.3f} "
          f"work_seconds={work:.3f} seconds={time.time() - began:.3f} torch_peak_bytes={peak} "
          f"torch={torch.__version__} device={a.device}", flush=True)


if __name__ == "__main__":
    main()
