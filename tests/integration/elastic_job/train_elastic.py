"""A small elastic training job for the tests: real torch.distributed (gloo, CPU) under torchrun.

Linear regression on a fixed synthetic data set. Every step takes the same global batch,
split evenly among the ranks, and sums the ranks' gradients, so the trajectory is the same
for any world size (1, 2, 3, 4, 6 ranks): a run that lost and regained workers must end
within float rounding of an undisturbed one. Rank 0 checkpoints every CKPT_EVERY steps
(atomically) to ``$CKPT_DIR`` and appends ``<step> <world size> <unix time>`` to ``steps.log``
there; a
restarted world resumes from the checkpoint. Each rank writes its newest step to
``$ALNAIR_PROGRESS_FILE`` (what the local agent relays). At the end rank 0 writes ``final.pt``.

Environment: CKPT_DIR (required), STEPS (default 120), CKPT_EVERY (5), STEP_SLEEP (0.05 s),
DEVICE (cpu; cuda puts the model, the data and gloo's all-reduce on the GPU, where several
ranks may share one card), WIDTH (0; > 0 adds a WIDTH×WIDTH matmul per step on the device,
so that a step does real GPU work).
"""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

GLOBAL_BATCH = 48


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(GLOBAL_BATCH * 10, 8, generator=g)
    w = torch.arange(1.0, 9.0).unsqueeze(1)
    return x, x @ w + 0.01 * torch.randn(GLOBAL_BATCH * 10, 1, generator=g)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt_dir = Path(os.environ["CKPT_DIR"])
    steps, every = int(os.environ.get("STEPS", "120")), int(os.environ.get("CKPT_EVERY", "5"))
    pause = float(os.environ.get("STEP_SLEEP", "0.05"))
    progress = os.environ.get("ALNAIR_PROGRESS_FILE")
    device = torch.device(os.environ.get("DEVICE", "cpu"))
    width = int(os.environ.get("WIDTH", "0"))
    burn = torch.randn(width, width, device=device) if width else None
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(device)
    step = 0
    ckpt = ckpt_dir / "checkpoint.pt"
    if ckpt.exists():
        saved = torch.load(ckpt, map_location=device)
        model.load_state_dict(saved["model"])
        step = saved["step"]
    x, y = (t.to(device) for t in data())
    shard = GLOBAL_BATCH // world
    while step < steps:
        began = time.monotonic()
        start = (step * GLOBAL_BATCH) % len(x) + rank * shard
        xb, yb = x[start:start + shard], y[start:start + shard]
        model.zero_grad()
        loss = ((model(xb) - yb) ** 2).sum() / GLOBAL_BATCH
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
        step += 1
        if burn is not None:
            (burn @ burn).sum().item()
        time.sleep(pause)
        if rank == 0:
            with open(ckpt_dir / "steps.log", "a") as f:
                f.write(f"{step} {world} {time.time():.3f}\n")
            if step % every == 0:
                torch.save({"model": model.state_dict(), "step": step}, ckpt_dir / "checkpoint.tmp")
                os.replace(ckpt_dir / "checkpoint.tmp", ckpt)
        if progress:
            Path(progress + ".tmp").write_text(f"{step} {time.monotonic() - began:.6f}\n")
            os.replace(progress + ".tmp", progress)
    if rank == 0:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, ckpt_dir / "final.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
