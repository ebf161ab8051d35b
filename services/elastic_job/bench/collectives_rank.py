"""One rank of the collectives bench: the timed all-reduces and training steps of one backend, in one process.

Started by ``collectives_bench.py`` (the launcher), never by hand in normal use: once per rank for the torch
backends (RANK/WORLD_SIZE/MASTER_* in the environment), under ``mpirun`` for MPI. Rank 0 writes
``OUT/<backend>.json``; the launcher reads it when the ranks are done. Imports its sibling
``collectives_report`` from the script's directory, which Python puts first on sys.path for
``python path/to/collectives_rank.py`` (mpirun included).

    python collectives_rank.py --worker gloo --out DIR --device cpu --min-bytes 1024 --max-bytes 4096 ...
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

from collectives_report import bus_bandwidth, human_bytes, human_time, message_sizes, write_json

TORCH_BACKENDS = ("nccl", "gloo")
MODELS = {  # layers, dim, heads, seq, vocab, per-rank batch
    "cuda": {"layers": 16, "dim": 1024, "heads": 16, "seq": 512, "vocab": 32768, "batch": 8},
    "cpu": {"layers": 2, "dim": 128, "heads": 4, "seq": 64, "vocab": 1024, "batch": 4},
}


class TorchComm:
    """torch.distributed as the benchmark's four operations."""

    def __init__(self, dist, torch, backend: str, device) -> None:
        self.dist, self.torch, self.device = dist, torch, device
        self.small = device if backend == "nccl" else torch.device("cpu")
        self.rank, self.world, self.mode = dist.get_rank(), dist.get_world_size(), device.type

    def allreduce(self, t) -> None:
        self.dist.all_reduce(t)

    def barrier(self) -> None:
        self.dist.barrier()

    def allgather(self, x: float) -> list[float]:
        t = self.torch.tensor([float(x)], dtype=self.torch.float64, device=self.small)
        outs = [self.torch.empty_like(t) for _ in range(self.world)]
        self.dist.all_gather(outs, t)
        return [float(o.item()) for o in outs]


def _host_view(t):
    """A numpy view of a host tensor for mpi4py, or the tensor itself (DLPack) where numpy is missing."""
    try:
        return t.numpy()
    except (ImportError, RuntimeError):
        return t


def _mpix_cuda_support() -> bool | None:
    """Open MPI's run-time answer (MPIX_Query_cuda_support in the libmpi mpi4py loaded); None if unknown."""
    import ctypes

    for name in ("libmpi.so.40", "libmpi.so.12", "libmpi.so"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        fn = getattr(lib, "MPIX_Query_cuda_support", None)
        if fn is None:
            return None
        fn.restype = ctypes.c_int
        return bool(fn())
    return None


class MpiComm:
    """mpi4py's COMM_WORLD; device buffers go to MPI only when it is CUDA-aware, else via pinned host memory."""

    def __init__(self, MPI, torch, device, cuda_aware: bool) -> None:
        self.MPI, self.torch, self.device, self.comm = MPI, torch, device, MPI.COMM_WORLD
        self.rank, self.world = self.comm.Get_rank(), self.comm.Get_size()
        self.mode = "host" if device.type == "cpu" else ("device" if cuda_aware else "host-staged")
        self.host = None

    def _staging(self, count: int):
        if self.host is None or self.host.numel() < count:
            self.host = None  # free the old one first
            self.host = self.torch.empty(count, dtype=self.torch.float32, pin_memory=True)
        return self.host[:count]

    def allreduce(self, t) -> None:
        if self.mode == "host":
            self.comm.Allreduce(self.MPI.IN_PLACE, _host_view(t))
        elif self.mode == "device":
            self.torch.cuda.synchronize(self.device)  # MPI reads the buffer outside torch's stream
            self.comm.Allreduce(self.MPI.IN_PLACE, t)
        else:
            host = self._staging(t.numel())
            host.copy_(t)  # synchronous D2H
            self.comm.Allreduce(self.MPI.IN_PLACE, _host_view(host))
            t.copy_(host)  # H2D, waited for by the caller's synchronisation

    def barrier(self) -> None:
        self.comm.Barrier()

    def allgather(self, x: float) -> list[float]:
        return [float(v) for v in self.comm.allgather(float(x))]


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_allreduce(comm, torch, device, buf, nbytes: int, warmup: int, reps: int, budget: float) -> dict:
    """One size: a checked all-reduce, warm-up, then ``reps`` timed batches of an agreed iteration count."""
    count = nbytes // 4
    t = buf[:count]
    t.fill_(comm.rank + 1)
    comm.allreduce(t)
    _sync(torch, device)
    expected = comm.world * (comm.world + 1) / 2
    wrong = int((t != expected).sum().item())
    check = "ok" if wrong == 0 else f"{wrong} of {count} elements != {expected:g} (first {t[0].item():g})"
    t.zero_()  # timed on zeros: values stay bounded however many iterations run
    one = []
    for _ in range(max(1, warmup)):
        began = time.perf_counter()
        comm.allreduce(t)
        _sync(torch, device)
        one.append(time.perf_counter() - began)
    # Every rank must run the same number of iterations, so the count comes from values all ranks gathered:
    # the slowest rank's warm-up, then the slowest rank's last batch (a batch slower than the warm-up said,
    # e.g. on a loaded host, shrinks the next one); past 3 budgets of agreed time the size ends early.
    per = max(comm.allgather(statistics.median(one)))
    inners, times, spent = [], [], 0.0
    for _ in range(reps):
        inner = max(1, min(10000, int(budget / reps / per)))
        comm.barrier()
        _sync(torch, device)
        began = time.perf_counter()
        for _ in range(inner):
            comm.allreduce(t)
        _sync(torch, device)
        times.append((time.perf_counter() - began) / inner)
        inners.append(inner)
        per = max(comm.allgather(times[-1]))
        spent += inner * per
        if spent > 3 * budget:
            break
    median = statistics.median(times)
    algbw = nbytes / median / 1e9
    return {"bytes": nbytes, "count": count, "inner": inners, "times_s": times, "time_s": median,
            "algbw_GBps": algbw, "busbw_GBps": bus_bandwidth(algbw, comm.world), "check": check}


def build_model(torch, cfg: dict):
    from torch import nn

    class Lm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg["vocab"], cfg["dim"])
            self.pos = nn.Parameter(torch.zeros(cfg["seq"], cfg["dim"]))
            block = nn.TransformerEncoderLayer(cfg["dim"], cfg["heads"], 4 * cfg["dim"], dropout=0.0,
                                               activation="gelu", batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, cfg["layers"], enable_nested_tensor=False)
            self.norm = nn.LayerNorm(cfg["dim"])
            self.head = nn.Linear(cfg["dim"], cfg["vocab"], bias=False)
            self.head.weight = self.embed.weight
            mask = nn.Transformer.generate_square_subsequent_mask(cfg["seq"])
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, tokens):
            x = self.embed(tokens) + self.pos[: tokens.shape[1]]
            return self.head(self.norm(self.blocks(x, mask=self.mask, is_causal=True)))

    return Lm()


def train_steps(comm, torch, device, backend: str, steps: int, warmup: int) -> dict:
    """Same model, per-rank batch and AdamW for every backend; DDP for torch's, one flat bucket for MPI."""
    import torch.nn.functional as F

    cfg = MODELS[device.type]
    torch.manual_seed(0)  # identical replicas on every rank
    model = build_model(torch, cfg).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    total = sum(p.numel() for p in params)
    gen = torch.Generator().manual_seed(1000 + comm.rank)
    tokens = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=gen).to(device)
    x, y = tokens[:, :-1], tokens[:, 1:].reshape(-1)
    if backend in TORCH_BACKENDS:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        reduction = "DDP (25 MiB buckets, overlapped with backward)"
    else:
        net = model
        flat = torch.empty(total, dtype=torch.float32, device=device)
        where = {"host": "host buffers", "host-staged": "host-staged", "device": "device buffers"}[comm.mode]
        reduction = f"one {total * 4 / 2**20:.0f} MiB bucket after backward, mpi4py Allreduce, {where}"
    opt = torch.optim.AdamW(params, lr=1e-4)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step() -> tuple[float, float]:
        opt.zero_grad(set_to_none=False)
        with autocast:
            loss = F.cross_entropy(net(x).reshape(-1, cfg["vocab"]).float(), y)
        loss.backward()
        comm_s = 0.0
        if backend not in TORCH_BACKENDS:
            _sync(torch, device)
            began = time.perf_counter()
            offset = 0
            for p in params:
                flat[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
                offset += p.numel()
            comm.allreduce(flat)
            flat.div_(comm.world)
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
            _sync(torch, device)
            comm_s = time.perf_counter() - began
        opt.step()
        return float(loss.item()), comm_s

    losses = [step()[0] for _ in range(warmup)]
    step_s, comm_s = [], []
    for _ in range(steps):
        comm.barrier()
        _sync(torch, device)
        began = time.perf_counter()
        loss, c = step()
        _sync(torch, device)
        step_s.append(time.perf_counter() - began)
        comm_s.append(c)
        losses.append(loss)
    with torch.no_grad():
        checksum = float(sum(p.double().sum() for p in params).item())
    sums = comm.allgather(checksum)
    median = statistics.median(step_s)
    mpi = backend not in TORCH_BACKENDS
    return {"model": cfg, "params": total, "precision": "bf16 autocast" if device.type == "cuda" else "float32",
            "reduction": reduction, "warmup": warmup, "step_s": step_s, "median_s": median,
            "samples_per_s": comm.world * cfg["batch"] / median, "comm_s": comm_s if mpi else None,
            "comm_share": statistics.median(c / s for c, s in zip(comm_s, step_s, strict=True)) if mpi else None,
            "losses": losses, "param_checksums": sums,
            "in_sync": max(sums) - min(sums) <= 1e-9 * max(1.0, abs(sums[0]))}


def _watchdog(deadline: float) -> None:
    """A rank whose parent (the launcher, or mpirun) is gone, or that outlives its deadline, ends itself:
    a killed launcher leaves no rank holding a GPU (mpirun puts its ranks in process groups of their own)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and time.time() < deadline:
            time.sleep(1)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def _rank_device(torch, kind: str, local: int):
    """The node-local rank's device, made current: rank r on cuda:r (on cuda:r mod the cards
    seen, where the launcher let ranks share a card: its one-GPU dry run), or the CPU."""
    device = torch.device(f"cuda:{local % torch.cuda.device_count()}" if kind == "cuda" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def rank_main(args) -> int:
    """One rank of one backend: rank 0 rewrites DIR/<backend>.json after every size (a cut-off run keeps its part)."""
    _watchdog(args.rank_deadline)
    import torch

    backend, out = args.worker, Path(args.out)
    if backend in TORCH_BACKENDS:
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        device = _rank_device(torch, args.device, local)
        extra = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120), **extra)
        comm = TorchComm(dist, torch, backend, device)
        info = {"nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None}
    else:
        import mpi4py
        from mpi4py import MPI

        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("MPI_LOCALRANKID",
                                                                                  MPI.COMM_WORLD.Get_rank())))
        device = _rank_device(torch, args.device, local)
        runtime = _mpix_cuda_support()
        comm = MpiComm(MPI, torch, device, cuda_aware=args.mpi_mode == "device" and runtime is not False)
        info = {"mpi4py": mpi4py.__version__, "library": MPI.Get_library_version().strip("\x00 \n"),
                "vendor": "{} {}".format(MPI.get_vendor()[0], ".".join(map(str, MPI.get_vendor()[1]))),
                "standard": "{}.{}".format(*MPI.Get_version()), "mpix_query_cuda_support": runtime}
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // comm.world))
    record = {"backend": backend, "rank": comm.rank, "world": comm.world, "device": str(device), "mode": comm.mode,
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
              "info": info, "sizes": [], "stopped_early": None, "train": {}}
    sizes = message_sizes(args.min_bytes, args.max_bytes)
    buf = torch.empty(args.max_bytes // 4, dtype=torch.float32, device=device)
    path = out / f"{backend}.json"
    for _ in range(20):  # connections and first-call costs, before any size is timed
        comm.allreduce(buf[: args.min_bytes // 4])
    _sync(torch, device)
    for nbytes in sizes:
        if min(comm.allgather(float(time.time() < args.collectives_until))) == 0.0:
            record["stopped_early"] = f"time for collectives used up before {human_bytes(nbytes)}"
            break
        cell = time_allreduce(comm, torch, device, buf, nbytes, args.warmup, args.reps, args.budget)
        record["sizes"].append(cell)
        if comm.rank == 0:
            print(f"[{backend}] {human_bytes(nbytes):>7}  busbw {cell['busbw_GBps']:9.3f} GB/s  "
                  f"{human_time(cell['time_s']):>10}  {len(cell['times_s'])} batches of ≤{max(cell['inner'])}  "
                  f"check {cell['check']}", flush=True)
            write_json(path, record)
    del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if args.train_steps > 0:
        record["train"] = train_steps(comm, torch, device, backend, args.train_steps, args.train_warmup)
        if comm.rank == 0:
            t = record["train"]
            print(f"[{backend}] train step {human_time(t['median_s'])}  {t['samples_per_s']:.1f} samples/s  "
                  f"in sync {t['in_sync']}", flush=True)
    if comm.rank == 0:
        write_json(path, record)
    if backend in TORCH_BACKENDS:
        # Every result is written; torch's teardown of gloo's threads at exit sometimes aborts (std::terminate),
        # which would read as a failed rank, so a torch rank leaves without it once its peers are done too.
        # (An MPI rank returns: mpi4py's exit hook calls MPI_Finalize, which mpirun waits for.)
        comm.barrier()
        sys.stdout.flush()
        os._exit(0)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line ``collectives_bench.worker_args`` builds; the measurement knobs have no defaults here
    (the launcher's are the only ones)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", required=True, help="the backend: nccl, gloo, mpi or mpi-tcp")
    p.add_argument("--out", required=True, help="directory for <backend>.json")
    p.add_argument("--device", choices=["cuda", "cpu"], required=True)
    for flag in ("--min-bytes", "--max-bytes", "--warmup", "--reps", "--train-steps", "--train-warmup"):
        p.add_argument(flag, type=int, required=True)
    p.add_argument("--budget", type=float, required=True, help="seconds of timed all-reduces per size")
    p.add_argument("--collectives-until", type=float, default=float("inf"), help="epoch seconds: no size starts after")
    p.add_argument("--rank-deadline", type=float, default=float("inf"), help="epoch seconds: the rank ends itself")
    p.add_argument("--mpi-mode", default="host-staged", help="MPI buffers: device, or host-staged (torch: host)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        return rank_main(parse_args(argv))
    except ValueError as e:
        print(f"collectives_rank: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
