"""Workload families the training detector had never seen (issue #24 §1), for its labelled corpus.

Each runs for ``--seconds`` and appends the wall-clock end of every iteration (an optimizer
step for the trainings, a served batch for the servers) to ``--truth-file``. Models and data
are generated here; the trainings reuse ``opendata_models`` (ResNet-shaped CNN, causal LM).

==================  ===========================================================  ========
family              what it does                                                 label
==================  ===========================================================  ========
``eval_train``      CNN training, every ``--eval-every`` s an evaluation pass     training
                    of ``--eval-seconds`` (inference, accuracy on the host)
``accum_train``     causal LM, ``--accum`` micro-batches per optimizer step       training
``finetune_frozen`` frozen ResNet backbone (eval, no grad), a trained head         training
``notebook_bursts`` a notebook: idle for 1-5 s, trains for 1-5 s, again            training
``stalled_train``   CNN steps waiting on slow storage (random stalls, mean         training
                    ``--stall`` s, on ``--stall-share`` of the steps)
``rl_loop``         policy-gradient RL: CPU environment steps, GPU update          training
``diffusion_train`` denoiser (small conv U-Net) on noised images, MSE              training
``server_mixed``    inference server, dynamic batching, request rate that           other
                    changes every 3 s (10/60/250 per s), two models
``infer_host``      offline batch inference with CPU pre- and post-processing       other
==================  ===========================================================  ========

    python corpus_workloads.py eval_train --seconds 15 --truth-file /tmp/t.txt
    python corpus_workloads.py rl_loop --device cpu --seconds 2 --width 16
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import opendata_models as om  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

TRAINING = {"eval_train": True, "accum_train": True, "finetune_frozen": True, "notebook_bursts": True,
            "stalled_train": True, "rl_loop": True, "diffusion_train": True,
            "server_mixed": False, "infer_host": False}
"""Ground truth for the detector: does the family run a training loop?"""

Mark = Callable[[], None]


def _resnet_step(a: argparse.Namespace) -> tuple[nn.Module, Callable[[int], None]]:
    """The ResNet-shaped CNN in training mode and its SGD step on one fixed batch."""
    model = om.resnet(a.width, a.layers).to(a.device).train()
    x = torch.randn(a.batch, 3, a.image, a.image, device=a.device)
    y = torch.randint(0, 100, (a.batch,), device=a.device)
    return model, om._trainer(model, a, lambda i: F.cross_entropy(model(x), y))


def eval_train(a: argparse.Namespace, mark: Mark, end: float) -> None:
    model, step = _resnet_step(a)
    held_out = torch.randn(2 * a.batch, 3, a.image, a.image, device=a.device)
    next_eval = time.time() + a.eval_every
    i = 0
    while time.time() < end:
        model.train()
        step(i)
        mark()
        i += 1
        if time.time() >= next_eval:
            model.eval()
            stop = time.time() + a.eval_seconds
            correct = []
            with torch.inference_mode(), om._autocast(a):
                while time.time() < stop:
                    correct.append(model(held_out).argmax(1).cpu())
            sum(int((c == 0).sum()) for c in correct)  # the accuracy, on the host
            next_eval = time.time() + a.eval_every


def accum_train(a: argparse.Namespace, mark: Mark, end: float) -> None:
    vocab, d = 8192, a.width
    layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, dropout=0.0, batch_first=True, norm_first=True)
    enc = nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
    embed, head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
    model = nn.ModuleList([embed, enc, head]).to(a.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    mask = nn.Transformer.generate_square_subsequent_mask(a.seq, device=a.device)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1), device=a.device)
    while time.time() < end:
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accum):
            with om._autocast(a):
                h = enc(embed(tokens[:, :-1]), mask=mask, is_causal=True)
                loss = F.cross_entropy(head(h).flatten(0, 1).float(), tokens[:, 1:].flatten()) / a.accum
            loss.backward()
        opt.step()
        loss.item()
        mark()


def finetune_frozen(a: argparse.Namespace, mark: Mark, end: float) -> None:
    backbone = om.resnet(a.width, a.layers, classes=8 * a.width)[:-1].to(a.device).eval()
    for p in backbone.parameters():
        p.requires_grad_(False)
    head = nn.Sequential(nn.Linear(8 * a.width, 256), nn.ReLU(), nn.Linear(256, 10)).to(a.device)
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    x = torch.randn(a.batch, 3, a.image, a.image, device=a.device)
    y = torch.randint(0, 10, (a.batch,), device=a.device)
    while time.time() < end:
        with torch.no_grad(), om._autocast(a):
            feats = backbone(x)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(head(feats.float()), y)
        loss.backward()
        opt.step()
        loss.item()
        mark()


def notebook_bursts(a: argparse.Namespace, mark: Mark, end: float) -> None:
    rnd = random.Random(a.seed)
    _, step = _resnet_step(a)
    i = 0
    while time.time() < end:
        time.sleep(min(rnd.uniform(1, 5), max(0.0, end - time.time())))  # the user reads, edits a cell
        burst = time.time() + rnd.uniform(1, 5)
        while time.time() < min(burst, end):
            step(i)
            mark()
            i += 1


def stalled_train(a: argparse.Namespace, mark: Mark, end: float) -> None:
    rnd = random.Random(a.seed)
    _, step = _resnet_step(a)
    i = 0
    while time.time() < end:
        if rnd.random() < a.stall_share:
            time.sleep(rnd.expovariate(1 / a.stall))  # the next batch is still on its way
        step(i)
        mark()
        i += 1


class _Cart:
    """A batch of cart-pole environments, stepped on the CPU (numpy)."""

    def __init__(self, n: int, seed: int) -> None:
        import numpy as np

        self.np, self.rng = np, np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, (n, 4))

    def step(self, action):  # type: ignore[no-untyped-def]
        np = self.np
        x, v, th, w = self.state.T
        force = np.where(action > 0, 10.0, -10.0)
        cos, sin = np.cos(th), np.sin(th)
        tmp = (force + 0.05 * w * w * sin) / 1.1
        acc_th = (9.8 * sin - cos * tmp) / (0.5 * (4 / 3 - 0.1 * cos * cos / 1.1))
        acc_x = tmp - 0.05 * acc_th * cos / 1.1
        self.state = np.stack([x + 0.02 * v, v + 0.02 * acc_x, th + 0.02 * w, w + 0.02 * acc_th], 1)
        done = (np.abs(self.state[:, 0]) > 2.4) | (np.abs(self.state[:, 2]) > 0.21)
        self.state[done] = self.rng.uniform(-0.05, 0.05, (int(done.sum()), 4))
        return self.state.astype(np.float32), (~done).astype(np.float32)


def rl_loop(a: argparse.Namespace, mark: Mark, end: float) -> None:
    envs = _Cart(a.batch, a.seed)
    policy = nn.Sequential(nn.Linear(4, a.width), nn.Tanh(), nn.Linear(a.width, a.width), nn.Tanh(),
                           nn.Linear(a.width, 2)).to(a.device)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-4)
    obs = torch.from_numpy(envs.state.astype("float32"))
    while time.time() < end:
        states, actions, rewards = [], [], []
        for _ in range(a.horizon):  # roll out: one GPU forward per environment step
            o = obs.to(a.device)
            with torch.no_grad():
                act = torch.distributions.Categorical(logits=policy(o)).sample()
            nxt, reward = envs.step(act.cpu().numpy())
            states.append(o)
            actions.append(act)
            rewards.append(torch.from_numpy(reward).to(a.device))
            obs = torch.from_numpy(nxt)
        s, act = torch.cat(states), torch.cat(actions)
        ret = torch.stack(rewards).flip(0).cumsum(0).flip(0).flatten()
        adv = (ret - ret.mean()) / (ret.std() + 1e-6)
        for _ in range(a.update_epochs):  # the update: a few passes of policy gradient
            opt.zero_grad(set_to_none=True)
            logp = torch.distributions.Categorical(logits=policy(s)).log_prob(act)
            loss = -(logp * adv).mean()
            loss.backward()
            opt.step()
        loss.item()
        mark()


class _Denoiser(nn.Module):
    def __init__(self, w: int) -> None:
        super().__init__()
        self.t = nn.Sequential(nn.Linear(1, w), nn.SiLU(), nn.Linear(w, w))
        self.d1, self.d2 = nn.Conv2d(3, w, 3, 1, 1), nn.Conv2d(w, 2 * w, 3, 2, 1)
        self.mid = nn.Conv2d(2 * w, 2 * w, 3, 1, 1)
        self.u1, self.out = nn.ConvTranspose2d(2 * w, w, 4, 2, 1), nn.Conv2d(2 * w, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h1 = F.silu(self.d1(x) + self.t(t)[:, :, None, None])
        h2 = F.silu(self.d2(h1))
        h = F.silu(self.u1(F.silu(self.mid(h2))))
        return self.out(torch.cat([h, h1], 1))


def diffusion_train(a: argparse.Namespace, mark: Mark, end: float) -> None:
    model = _Denoiser(a.width).to(a.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(a.batch, 3, a.image, a.image, device=a.device)
    while time.time() < end:
        t = torch.rand(a.batch, 1, device=a.device)
        noise = torch.randn_like(images)
        alpha = torch.cos(t * 1.5707963)[:, :, None, None]
        noisy = alpha * images + (1 - alpha * alpha).sqrt() * noise
        opt.zero_grad(set_to_none=True)
        with om._autocast(a):
            loss = F.mse_loss(model(noisy, t).float(), noise)
        loss.backward()
        opt.step()
        loss.item()
        mark()


def server_mixed(a: argparse.Namespace, mark: Mark, end: float) -> None:
    rnd = random.Random(a.seed)
    small = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).to(a.device).eval()
    big = om.resnet(a.width, a.layers).to(a.device).eval()
    pending: collections.deque[float] = collections.deque()
    rate, next_change, due = 10.0, 0.0, time.time()
    while time.time() < end:
        now = time.time()
        if now >= next_change:
            rate, next_change = rnd.choice((10.0, 60.0, 250.0)), now + 3.0
        while due <= now:  # requests that arrived since the last batch
            pending.append(due)
            due += rnd.expovariate(rate)
        if not pending:
            time.sleep(max(0.0, min(due, end) - time.time()))
            continue
        n = min(len(pending), a.batch)
        for _ in range(n):
            pending.popleft()
        with torch.inference_mode(), om._autocast(a):
            if rnd.random() < 0.7:
                small(torch.randn(n, 512, device=a.device)).sum().item()
            else:
                big(torch.randn(n, 3, a.image, a.image, device=a.device)).argmax(1).cpu()
        mark()


def infer_host(a: argparse.Namespace, mark: Mark, end: float) -> None:
    import numpy as np

    rng = np.random.default_rng(a.seed)
    model = om.resnet(a.width, a.layers).to(a.device).eval()
    while time.time() < end:
        raw = rng.random((a.batch, 3, a.image * 2, a.image * 2), dtype=np.float32)  # decode
        img = raw.reshape(a.batch, 3, a.image, 2, a.image, 2).mean(axis=(3, 5))     # resize
        img = (img - img.mean()) / (img.std() + 1e-6)
        with torch.inference_mode(), om._autocast(a):
            top = model(torch.from_numpy(img).to(a.device)).topk(5).indices.cpu().numpy()
        np.sort(top, axis=1)  # post-processing on the host
        mark()


FAMILIES = {f.__name__: f for f in (eval_train, accum_train, finetune_frozen, notebook_bursts, stalled_train,
                                    rl_loop, diffusion_train, server_mixed, infer_host)}
assert set(FAMILIES) == set(TRAINING)


def options(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=sorted(FAMILIES))
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--image", type=int, default=64)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--eval-every", type=float, default=4.0)
    p.add_argument("--eval-seconds", type=float, default=1.5)
    p.add_argument("--stall", type=float, default=0.3, help="mean stall, seconds")
    p.add_argument("--stall-share", type=float, default=0.3, help="share of steps that stall")
    p.add_argument("--horizon", type=int, default=64, help="environment steps per rollout (rl_loop)")
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--truth-file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = options(argv)
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    truth = open(a.truth_file, "a", buffering=1) if a.truth_file else None  # noqa: SIM115
    count = [0]

    def mark() -> None:
        count[0] += 1
        if truth:
            truth.write(f"{time.time():.6f}\n")

    started = time.time()
    FAMILIES[a.workload](a, mark, started + a.seconds)
    print(f"{a.workload}: {count[0]} iterations in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
