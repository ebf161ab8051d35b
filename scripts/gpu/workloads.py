"""Real PyTorch workloads for recordings and the end-to-end GPU runs.

Each workload runs for ``--seconds`` and, when ``ALNAIR_TRUTH_FILE`` is set, appends the
wall-clock end time of every iteration (or request) to it: the ground truth that labelled
recordings carry, so detection can be scored against what really happened.

``--iterations N`` makes it a fixed amount of work instead (N iterations or requests, however
long they take): what completion-time comparisons need (``e2e_share.py``). ``--alloc-gib G``
first tries to take G GiB more device memory and, refused (a memory limit), exits with
``OOM_EXIT`` after saying it caught ``torch.OutOfMemoryError``.

    python workloads.py cnn_train --seconds 20 --batch 128
    python workloads.py cnn_train --iterations 2500 --batch 32
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import torch
from torch import nn

OOM_EXIT = 42
"""Exit code of a workload whose ``--alloc-gib`` was refused with ``torch.OutOfMemoryError``."""


class Truth:
    def __init__(self) -> None:
        path = os.environ.get("ALNAIR_TRUTH_FILE")
        self.file = open(path, "a", buffering=1) if path else None  # noqa: SIM115
        self.first: float | None = None
        self.last: float | None = None

    def mark(self) -> None:
        self.last = time.time()
        if self.first is None:
            self.first = self.last
        if self.file:
            self.file.write(f"{self.last:.6f}\n")


def _more(a: argparse.Namespace, done: int, end: float) -> bool:
    """Another iteration? ``--iterations`` (fixed work) when given, else until ``--seconds``."""
    return done < a.iterations if a.iterations else time.time() < end


def _train_loop(model: nn.Module, make_batch, a: argparse.Namespace, truth: Truth) -> int:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    end = time.time() + a.seconds
    steps = 0
    while _more(a, steps, end):
        x, y = make_batch()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # the usual per-step logging sync
        truth.mark()
        steps += 1
    return steps


def cnn_train(a: argparse.Namespace, truth: Truth) -> int:
    dev = "cuda"
    layers: list[nn.Module] = []
    ch = 3
    for width in (64, 128, 256, 256):
        layers += [nn.Conv2d(ch, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                   nn.MaxPool2d(2)]
        ch = width
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(256 * 4 * 4, 100)).to(dev)
    x = torch.randn(a.batch, 3, 64, 64, device=dev)
    y = torch.randint(0, 100, (a.batch,), device=dev)
    return _train_loop(model, lambda: (x, y), a, truth)


def transformer_train(a: argparse.Namespace, truth: Truth) -> int:
    dev = "cuda"
    d = a.width
    enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True), num_layers=a.layers
    )
    model = nn.Sequential(nn.Embedding(8000, d), enc, nn.Flatten(1), nn.LazyLinear(10)).to(dev)
    x = torch.randint(0, 8000, (a.batch, 128), device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    model(x)  # materialise the lazy layer
    return _train_loop(model, lambda: (x, y), a, truth)


def mlp_train(a: argparse.Namespace, truth: Truth) -> int:
    dev = "cuda"
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(dev)
    x = torch.randn(a.batch, 512, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    return _train_loop(model, lambda: (x, y), a, truth)


def dataload_train(a: argparse.Namespace, truth: Truth) -> int:
    """Training whose input pipeline is CPU-heavy: GPU bursts separated by host work."""
    import numpy as np

    dev = "cuda"
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(dev)
    rng = np.random.default_rng(0)

    def batch():  # type: ignore[no-untyped-def]
        imgs = rng.random((a.batch, 3, 96, 96), dtype=np.float32)
        imgs = (imgs - imgs.mean(axis=(2, 3), keepdims=True)) / (imgs.std(axis=(2, 3), keepdims=True) + 1e-6)
        x = torch.from_numpy(imgs).pin_memory().to(dev, non_blocking=True)
        return x, torch.randint(0, 10, (a.batch,), device=dev)

    return _train_loop(model, batch, a, truth)


def inference_poisson(a: argparse.Namespace, truth: Truth) -> int:
    """Requests at random (Poisson) arrivals: busy, but with no period."""
    dev = "cuda"
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev).eval()
    rnd = random.Random(a.seed)
    end = time.time() + a.seconds
    n = 0
    with torch.inference_mode():
        while _more(a, n, end):
            time.sleep(rnd.expovariate(a.rate))
            batch = rnd.choice((1, 8, 32, 128, 512))
            model(torch.randn(batch, 1024, device=dev)).sum().item()
            truth.mark()
            n += 1
    return n


def irregular(a: argparse.Namespace, truth: Truth) -> int:
    """Random matmul sizes at random moments: no repeating structure at all."""
    dev = "cuda"
    rnd = random.Random(a.seed)
    end = time.time() + a.seconds
    n = 0
    while _more(a, n, end):
        size = rnd.choice((256, 1024, 2048, 4096, 8192))
        m = torch.randn(size, size, device=dev)
        for _ in range(rnd.randint(1, 20)):
            m = m @ m
            m = m / m.norm()
        torch.cuda.synchronize()
        time.sleep(rnd.uniform(0, 0.5))
        truth.mark()
        n += 1
    return n


def idle(a: argparse.Namespace, truth: Truth) -> int:
    """A notebook holding memory and doing nothing."""
    held = torch.empty(int(a.hold_gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    held.fill_(1)
    torch.cuda.synchronize()
    time.sleep(a.seconds)
    return 0


WORKLOADS = {f.__name__: f for f in (cnn_train, transformer_train, mlp_train, dataload_train,
                                     inference_poisson, irregular, idle)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--rate", type=float, default=20.0, help="requests/s (inference)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hold-gib", type=float, default=2.0)
    p.add_argument("--iterations", type=int, default=0,
                   help="fixed work: stop after N iterations/requests (0: run for --seconds)")
    p.add_argument("--alloc-gib", type=float, default=0.0,
                   help="first try to allocate this many GiB more (a memory-limit probe)")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    started = time.time()
    if a.alloc_gib:
        _probe_memory(a.workload, a.alloc_gib)
    truth = Truth()
    n = WORKLOADS[a.workload](a, truth)
    print(f"{a.workload}: {n} iterations in {time.time() - started:.1f} s", flush=True)
    if a.iterations:
        work = (truth.last - truth.first) if truth.first is not None and truth.last is not None else 0.0
        print(f"E2E_RESULT workload={a.workload} iterations={n} seconds={time.time() - started:.3f} "
              f"work_seconds={work:.3f}", flush=True)


def _probe_memory(workload: str, gib: float) -> None:
    """Take ``gib`` GiB on the device: refused → say so and exit ``OOM_EXIT``; granted → go on."""
    try:
        extra = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
        extra.fill_(1)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as e:
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"E2E_OOM caught torch.OutOfMemoryError allocating {gib:g} GiB: {first}", flush=True)
        sys.exit(OOM_EXIT)
    print(f"E2E_NO_OOM {workload}: {gib:g} GiB were granted (no memory limit refused them)", flush=True)
    del extra


if __name__ == "__main__":
    main()
