"""Real PyTorch workloads for recordings and the end-to-end GPU runs.

Each workload runs for ``--seconds`` and, when ``ALNAIR_TRUTH_FILE`` is set, appends the
wall-clock end time of every iteration (or request) to it: the ground truth that labelled
recordings carry, so detection can be scored against what really happened.

    python workloads.py cnn_train --seconds 20 --batch 128
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch
from torch import nn


class Truth:
    def __init__(self) -> None:
        path = os.environ.get("ALNAIR_TRUTH_FILE")
        self.file = open(path, "a", buffering=1) if path else None  # noqa: SIM115

    def mark(self) -> None:
        if self.file:
            self.file.write(f"{time.time():.6f}\n")


def _train_loop(model: nn.Module, make_batch, seconds: float, truth: Truth) -> int:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    end = time.time() + seconds
    steps = 0
    while time.time() < end:
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
    return _train_loop(model, lambda: (x, y), a.seconds, truth)


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
    return _train_loop(model, lambda: (x, y), a.seconds, truth)


def mlp_train(a: argparse.Namespace, truth: Truth) -> int:
    dev = "cuda"
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(dev)
    x = torch.randn(a.batch, 512, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    return _train_loop(model, lambda: (x, y), a.seconds, truth)


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

    return _train_loop(model, batch, a.seconds, truth)


def inference_poisson(a: argparse.Namespace, truth: Truth) -> int:
    """Requests at random (Poisson) arrivals: busy, but with no period."""
    dev = "cuda"
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev).eval()
    rnd = random.Random(a.seed)
    end = time.time() + a.seconds
    n = 0
    with torch.inference_mode():
        while time.time() < end:
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
    while time.time() < end:
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
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    started = time.time()
    n = WORKLOADS[a.workload](a, Truth())
    print(f"{a.workload}: {n} iterations in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
