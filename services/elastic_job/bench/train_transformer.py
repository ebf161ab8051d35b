"""A GPU-bound elastic training job for the two-GPU run (issue #21): a GPT-style transformer,
data-parallel (DDP) under torchrun, bf16 autocast on CUDA.

The same contract as ``tests/integration/elastic_job/train_elastic.py`` (what the bench and
the local agent read): rank 0 appends ``<step> <world size> <unix time> <samples done>`` to
``$CKPT_DIR/steps.log`` after every step and checkpoints every CKPT_EVERY steps; a restarted
world resumes from the checkpoint; each rank writes its step to ``$ALNAIR_PROGRESS_FILE``.

Data parallelism is weak scaling: each rank trains BATCH sequences per step, so a step at a
world of n trains n × BATCH samples, and the job ends once SAMPLES samples are trained (the
same work at any size). The checkpoint (model and optimizer) is copied into pinned host buffers
between steps and written to disk by a thread, so a save costs the step a device-to-host
copy, not a disk write; a restore loads the newest complete one.

Environment: CKPT_DIR (required), SAMPLES (default 10**9), CKPT_EVERY (50), DEVICE (cuda if
available), BACKEND (nccl on CUDA, gloo on CPU; NCCL refuses two ranks on one card, so
fractional workers sharing a card use gloo), LAYERS / DIM / HEADS / SEQ / BATCH / VOCAB (the
model and per-rank batch; defaults: ~300M parameters), COLLECTIVE_TIMEOUT (60 s: a collective
waiting on a dead peer fails after this, the bound the elastic-job README documents).
"""

import datetime
import os
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


class Gpt(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        x = self.blocks(x, mask=self.mask, is_causal=True)
        return self.head(self.norm(x))


class Checkpointer:
    """Snapshots copied into pinned host buffers between steps (allocated once, so a save
    costs the step one device-to-host copy), written by one thread; the newest complete file
    wins."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "checkpoint.pt"
        self.writer: threading.Thread | None = None
        self.host: dict | None = None

    def load(self, device: torch.device) -> dict | None:
        return torch.load(self.path, map_location=device) if self.path.exists() else None

    def save(self, state: dict) -> None:
        if self.writer is not None:
            self.writer.join()  # the buffers are the last snapshot's until it is written
        self.host = _copy_to_host(state, self.host)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.writer = threading.Thread(target=self._write, args=(self.host,), daemon=True)
        self.writer.start()

    def _write(self, host: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save(host, tmp)
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.join()


def _copy_to_host(value, into=None):  # type: ignore[no-untyped-def]
    """``value`` with every tensor copied to host memory: into ``into``'s tensors where it
    has one of the same shape (a snapshot before), else into new pinned ones."""
    if isinstance(value, torch.Tensor):
        if not (isinstance(into, torch.Tensor) and into.shape == value.shape and into.dtype == value.dtype):
            into = torch.empty(value.shape, dtype=value.dtype, pin_memory=value.is_cuda)
        return into.copy_(value.detach(), non_blocking=True)
    if isinstance(value, dict):
        into = into if isinstance(into, dict) else {}
        return {k: _copy_to_host(v, into.get(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        into = into if isinstance(into, list | tuple) and len(into) == len(value) else [None] * len(value)
        return type(value)(_copy_to_host(v, i) for v, i in zip(value, into, strict=True))
    return value


def main() -> None:
    device = torch.device(os.environ.get("DEVICE", "cuda" if torch.cuda.is_available() else "cpu"))
    backend = os.environ.get("BACKEND", "nccl" if device.type == "cuda" else "gloo")
    timeout = datetime.timedelta(seconds=env_int("COLLECTIVE_TIMEOUT", 60))
    if device.type == "cuda":
        torch.cuda.set_device(0)  # the agent's CUDA_VISIBLE_DEVICES names this worker's card
        torch.backends.cuda.matmul.allow_tf32 = True
    dist.init_process_group(backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt_dir = Path(os.environ["CKPT_DIR"])
    samples, every = env_int("SAMPLES", 10**9), env_int("CKPT_EVERY", 50)
    layers, dim, heads = env_int("LAYERS", 24), env_int("DIM", 1024), env_int("HEADS", 16)
    seq, batch, vocab = env_int("SEQ", 1024), env_int("BATCH", 8), env_int("VOCAB", 32768)
    progress = os.environ.get("ALNAIR_PROGRESS_FILE")
    torch.manual_seed(0)
    model = Gpt(vocab, dim, layers, heads, seq).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    checkpointer = Checkpointer(ckpt_dir)
    step = done = 0
    saved = checkpointer.load(device)
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, done = saved["step"], saved["samples"]
    ddp = DistributedDataParallel(model, device_ids=[0] if device.type == "cuda" else None)
    generator = torch.Generator(device=device).manual_seed(1000 + rank)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    while done < samples:
        began = time.monotonic()
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=device, generator=generator)
        with autocast:
            logits = ddp(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()  # the step's work is done on the device before it is logged
        step, done = step + 1, done + batch * world
        if rank == 0:
            with open(ckpt_dir / "steps.log", "a") as f:
                f.write(f"{step} {world} {time.time():.3f} {done}\n")
            if step % every == 0:
                checkpointer.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                   "step": step, "samples": done})
        if progress:
            Path(progress + ".tmp").write_text(f"{step} {time.monotonic() - began:.6f}\n")
            os.replace(progress + ".tmp", progress)
    checkpointer.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
