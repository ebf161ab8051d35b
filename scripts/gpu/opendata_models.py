"""The models and steps of ``opendata_workloads.py``: ``build(options)`` returns ``step(i)``.

Every step ends with a host synchronisation (``.item()``: the usual per-step logging read),
so an iteration's end time is when its GPU work finished; data is generated from the seed.
"""

from __future__ import annotations

import argparse
import contextlib
import random
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

Step = Callable[[int], None]


def build(a: argparse.Namespace) -> Step:
    return {"cnn_train": cnn_train, "lm_train": lm_train, "batch_infer": batch_infer,
            "poisson_infer": poisson_infer, "dataload_train": dataload_train, "gnn_train": gnn_train}[a.workload](a)


def _autocast(a: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    if a.precision == "bf16":
        return torch.autocast(device_type=a.device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.skip(x))


def resnet(width: int, blocks: int, classes: int = 100) -> nn.Module:
    """ResNet-18-shaped (four stages, widths w..8w), ``blocks`` basic blocks per stage."""
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    cin = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        for b in range(blocks):
            layers.append(_Block(cin, width * mult, 2 if stage and not b else 1))
            cin = width * mult
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def _trainer(model: nn.Module, a: argparse.Namespace, loss_of: Callable[[int], torch.Tensor]) -> Step:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step(i: int) -> None:
        opt.zero_grad(set_to_none=True)
        with _autocast(a):
            loss = loss_of(i)
        loss.backward()
        opt.step()
        loss.item()

    return step


def cnn_train(a: argparse.Namespace) -> Step:
    model = resnet(a.width, a.layers).to(a.device).train()
    x = torch.randn(a.batch, 3, a.image, a.image, device=a.device)
    y = torch.randint(0, 100, (a.batch,), device=a.device)
    return _trainer(model, a, lambda i: F.cross_entropy(model(x), y))


def batch_infer(a: argparse.Namespace) -> Step:
    model = resnet(a.width, a.layers).to(a.device).eval()
    x = torch.randn(a.batch, 3, a.image, a.image, device=a.device)

    def step(i: int) -> None:
        with torch.inference_mode(), _autocast(a):
            model(x).argmax(1).sum().item()

    return step


def lm_train(a: argparse.Namespace) -> Step:
    vocab, d = 8192, a.width
    layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, dropout=0.0, batch_first=True, norm_first=True)
    body = nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
    embed, head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
    model = nn.ModuleList([embed, body, head]).to(a.device).train()
    mask = nn.Transformer.generate_square_subsequent_mask(a.seq, device=a.device)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1), device=a.device)

    def loss(i: int) -> torch.Tensor:
        h = body(embed(tokens[:, :-1]), mask=mask, is_causal=True)
        return F.cross_entropy(head(h).flatten(0, 1).float(), tokens[:, 1:].flatten())

    return _trainer(model, a, loss)


def poisson_infer(a: argparse.Namespace) -> Step:
    """Requests arrive at exponential gaps (mean 1/rate); each is one batch of 1..``--batch``."""
    import time

    model = nn.Sequential(nn.Linear(1024, 4 * a.width * 16), nn.GELU(), nn.Linear(4 * a.width * 16, 1024))
    model = model.to(a.device).eval()
    rnd = random.Random(a.seed)
    sizes = [s for s in (1, 8, 32, 128, 512) if s <= a.batch] or [1]
    due = [time.monotonic()]

    def step(i: int) -> None:
        due[0] += rnd.expovariate(a.rate)
        wait = due[0] - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        with torch.inference_mode(), _autocast(a):
            model(torch.randn(rnd.choice(sizes), 1024, device=a.device)).sum().item()

    return step


class _Augmented(torch.utils.data.Dataset):
    """Images made and augmented on the CPU per sample (crop, flip, jitter, normalise)."""

    def __init__(self, side: int, seed: int) -> None:
        self.side, self.seed = side, seed

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        import numpy as np  # only this class needs it

        rng = np.random.default_rng(self.seed * 1_000_003 + i)
        pad = self.side + self.side // 4
        img = rng.random((3, pad, pad), dtype=np.float32)
        oy, ox = rng.integers(0, pad - self.side, 2)
        img = img[:, oy:oy + self.side, ox:ox + self.side]
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = img * rng.uniform(0.8, 1.2) + rng.uniform(-0.1, 0.1)
        img = np.ascontiguousarray((img - img.mean(axis=(1, 2), keepdims=True))
                                   / (img.std(axis=(1, 2), keepdims=True) + 1e-6))
        return torch.from_numpy(img), int(rng.integers(0, 10))


def dataload_train(a: argparse.Namespace) -> Step:
    side = a.image + a.image // 2
    loader = torch.utils.data.DataLoader(_Augmented(side, a.seed), batch_size=a.batch, num_workers=a.workers,
                                         pin_memory=a.device == "cuda", persistent_workers=a.workers > 0,
                                         prefetch_factor=2 if a.workers else None)
    batches = iter(loader)
    model = nn.Sequential(nn.Conv2d(3, a.width, 3, 2, 1), nn.ReLU(), nn.Conv2d(a.width, a.width, 3, 2, 1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(a.width, 10))
    model = model.to(a.device).train()
    def loss(i: int) -> torch.Tensor:
        x, y = next(batches)
        return F.cross_entropy(model(x.to(a.device, non_blocking=True)), y.to(a.device, non_blocking=True))

    return _trainer(model, a, loss)


def gnn_train(a: argparse.Namespace) -> Step:
    """Node classification on a random graph: ``--layers`` mean-aggregation layers (GraphSAGE-like)."""
    n, d = a.nodes, a.width
    g = torch.Generator().manual_seed(a.seed)
    src = torch.randint(0, n, (10 * n,), generator=g).to(a.device)
    dst = torch.randint(0, n, (10 * n,), generator=g).to(a.device)
    degree = torch.zeros(n, device=a.device).index_add_(0, dst, torch.ones_like(dst, dtype=torch.float))
    degree = degree.clamp(min=1).unsqueeze(1)
    feats = torch.randn(n, d, generator=g).to(a.device)
    labels = torch.randint(0, 16, (n,), generator=g).to(a.device)
    selfs = nn.ModuleList(nn.Linear(d, d) for _ in range(a.layers))
    neigh = nn.ModuleList(nn.Linear(d, d) for _ in range(a.layers))
    head = nn.Linear(d, 16)
    model = nn.ModuleList([selfs, neigh, head]).to(a.device).train()

    def loss(i: int) -> torch.Tensor:
        h = feats
        for s, m in zip(selfs, neigh, strict=True):
            agg = torch.zeros_like(h).index_add_(0, dst, h[src]) / degree.to(h.dtype)
            h = F.relu(s(h) + m(agg))
        return F.cross_entropy(head(h).float(), labels)

    return _trainer(model, a, loss)
