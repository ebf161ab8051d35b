"""Issue #16 on the H200: a training loop fed from an S3 server, epoch 1 vs later epochs
through the dataset cache, with the data-stall fraction and GPU utilisation of each epoch.

One run, one model, the same samples read four ways (each its own DataLoader, same
workers, same batch):

* ``memory``: the samples already in the workers' memory, no I/O: the step time the GPU
  alone allows (the "ideal" of the CoorDL paper's data-stall analysis);
* ``s3-direct``: boto3 ``get_object`` per sample, what training code does without a cache;
* ``cache-dir``: the data client (``CachedSamples``) over the local-mode directory tier,
  starting empty: epoch 1 reads S3 and writes back, later epochs hit;
* ``cache-redis``: the same over a redis-server (when one can be started here);
  ``cache-redis-io4``: over a server of its own with 4 I/O threads (``--io-threads``);
* ``cache-dir-per-sample``, ``cache-redis-per-sample``: the same, each sample fetched on its
  own (``__getitem__`` only, as before ``CachedSamples.__getitems__``), on a tier of its own:
  what fetching a batch's samples together (one tier request a batch) changes;
  ``cache-redis-group32`` (any N, any tier): a batch fetched N samples a request.

Data stall, two ways: the share of the epoch the training loop spends waiting for its next
batch (``wait``: time in ``next()`` of the loader, steps synchronised), and CoorDL's
``1 - ideal epoch time / epoch time`` against the ``memory`` epochs (``stall``); per way, the
median of the warm epochs (2..N) and its stall close the report (single epochs move by
±0.05 s, 5 % of a warm epoch, between runs: ``--epochs 6`` gives five warm ones).

    # the H200 (carry .whl with the boto3 wheels and .gpu-carry/ with versitygw and redis):
    bash scripts/gpu/repo_env.sh python3 scripts/gpu/cache_epochs.py --out "$OUT"
    # anywhere, small and on the CPU (checks the script, measures nothing):
    ALNAIR_TESTBIN=$(scripts/testbin | tail -1) .venv/bin/python scripts/gpu/cache_epochs.py \
        --device cpu --samples 256 --side 32 --batch 32 --workers 2 --out /tmp/ce
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.s3 import start_s3
from alnair_common.testing.testbin import locate
from alnair_dataset import CachedSamples, open_tier

CLASSES = 100


class MemorySamples:
    """The samples as bytes in memory (what the GPU alone allows)."""

    def __init__(self, blobs: list[bytes]) -> None:
        self.blobs = blobs

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> bytes:
        return self.blobs[i]


class PerSample:
    """A data set's samples one ``__getitem__`` at a time (no ``__getitems__``)."""

    def __init__(self, samples: Any) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> bytes:
        return self.samples[i]


class Grouped:
    """A batch's samples asked for in groups of ``n`` (``__getitems__`` per group, each group
    transformed before the next is fetched): between one tier request a batch and one a
    sample. Tests whether a whole batch's bytes in one reply (16 MB at the defaults) cost
    the worker more than they save in round trips."""

    def __init__(self, samples: Any, n: int) -> None:
        self.samples, self.n = samples, n

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> bytes:
        return self.samples[i]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        out: list[Any] = []
        for lo in range(0, len(indices), self.n):
            out += self.samples.__getitems__(indices[lo:lo + self.n])
        return out


class S3Samples:
    """One boto3 ``get_object`` per sample; a client per worker process."""

    def __init__(self, bucket: str, keys: list[str], options: dict[str, Any]) -> None:
        self.bucket, self.keys, self.options = bucket, keys, options
        self._client: Any = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> bytes:
        if self._client is None:
            import boto3
            from botocore.config import Config
            self._client = boto3.session.Session().client(
                "s3", config=Config(max_pool_connections=16), **self.options)
        return self._client.get_object(Bucket=self.bucket, Key=self.keys[i])["Body"].read()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}


def make_collate(side: int):
    def collate(blobs: list[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
        raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
        labels = torch.from_numpy(raw[:, 0].astype(np.int64) % CLASSES)
        images = torch.from_numpy(raw[:, 1:1 + 3 * side * side].copy()).view(-1, 3, side, side)
        return images, labels
    return collate


def model_for(width: int) -> nn.Module:
    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    w = width
    layers = (block(3, w, 2) + block(w, w, 1) + block(w, 2 * w, 2) + block(2 * w, 2 * w, 1)
              + block(2 * w, 4 * w, 2) + block(4 * w, 4 * w, 1) + block(4 * w, 8 * w, 2))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, CLASSES))


class GpuSampler:
    """NVML utilisation every 100 ms while sampling; nothing on the CPU."""

    def __init__(self, device: str) -> None:
        self.samples: list[int] = []
        self._on = threading.Event()
        self._stop = threading.Event()
        self._handle = None
        if device == "cuda":
            try:
                import pynvml
                pynvml.nvmlInit()
                self._nvml = pynvml
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on without it
                print(f"cache_epochs: no NVML ({exc}); GPU utilisation not sampled", flush=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            if self._on.is_set() and self._handle is not None:
                self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)

    def start(self) -> None:
        self.samples = []
        self._on.set()

    def stop(self) -> float | None:
        self._on.clear()
        return round(statistics.fmean(self.samples), 1) if self.samples else None

    def close(self) -> None:
        self._stop.set()


class Trainer:
    def __init__(self, opts: argparse.Namespace) -> None:
        torch.manual_seed(0)
        self.o = opts
        self.device = torch.device(opts.device)
        self.model = model_for(opts.width).to(self.device, memory_format=torch.channels_last)
        self.optimiser = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = nn.CrossEntropyLoss()
        self.gpu = GpuSampler(opts.device)
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16,
                                       enabled=opts.device == "cuda")

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        images = images.to(self.device, non_blocking=True).float().div_(255)
        images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.to(self.device, non_blocking=True)
        with self.autocast:
            loss = self.loss(self.model(images), labels)
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        self.optimiser.step()

    def epochs(self, label: str, samples: Any, count: int,
               after_epoch=None) -> list[dict[str, Any]]:
        loader = torch.utils.data.DataLoader(
            samples, batch_size=self.o.batch, shuffle=True, num_workers=self.o.workers,
            prefetch_factor=4 if self.o.workers else None,
            persistent_workers=bool(self.o.workers), pin_memory=self.device.type == "cuda",
            collate_fn=make_collate(self.o.side), drop_last=True)
        out = []
        for epoch in range(1, count + 1):
            self.sync()
            wait = 0.0
            first_wait = None
            steps = 0
            self.gpu.start()
            started = time.perf_counter()
            it = iter(loader)
            while True:
                asked = time.perf_counter()
                batch = next(it, None)
                wait += time.perf_counter() - asked
                if first_wait is None:
                    first_wait = wait  # the epoch's start: every worker fetches at once
                if batch is None:
                    break
                self.step(*batch)
                self.sync()
                steps += 1
            seconds = time.perf_counter() - started
            util = self.gpu.stop()
            row = {"way": label, "epoch": epoch, "seconds": round(seconds, 3),
                   "samples_per_s": round(steps * self.o.batch / seconds, 1),
                   "wait_fraction": round(wait / seconds, 4), "first_wait_s": round(first_wait, 4),
                   "gpu_util_mean": util}
            if after_epoch is not None:
                row |= after_epoch()
            print(f"cache_epochs: {json.dumps(row)}", flush=True)
            out.append(row)
        del loader
        return out


def upload(s3: Any, bucket: str, prefix: str, opts: argparse.Namespace) -> tuple[list[str], list[bytes]]:
    size = 1 + 3 * opts.side * opts.side
    rng = random.Random(1)
    blobs = [rng.randbytes(size) for _ in range(opts.samples)]
    keys = [f"{prefix}/{i // 1000:03d}/{i:06d}.img" for i in range(opts.samples)]
    client = s3.client()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kb: client.put_object(Bucket=bucket, Key=kb[0], Body=kb[1]),
                      zip(keys, blobs, strict=True)))
    return keys, blobs


def warm_summary(rows: list[dict[str, Any]], ideal: float | None) -> list[str]:
    """Per way, the cold epoch and the median of the warm ones (2..N) with its stall against
    the memory ideal: one table row that single epochs' ±0.05 s spread does not swing.
    Beside it the epoch's start — the wait for its first batch, when every worker fetches
    at once — and the stall of the rest of the epoch (against the memory epochs' rest): a
    fixed cost per epoch weighs in inverse proportion to the epoch's length."""
    def rest(r: dict[str, Any]) -> float:
        return r["seconds"] - r.get("first_wait_s", 0.0)

    memory = [r for r in rows if r["way"] == "memory"][1:]
    ideal_rest = statistics.median(map(rest, memory)) if memory else None
    lines = ["| way | epoch 1 s | warm epochs | warm median s | stall of the median | stall range "
             "| first batch, median s | stall after the first batch |",
             "|---|---|---|---|---|---|---|---|"]
    for way in dict.fromkeys(r["way"] for r in rows):
        mine = [r for r in rows if r["way"] == way]
        warm = [r["seconds"] for r in mine[1:]]
        if not warm:
            continue
        median = statistics.median(warm)
        stall = "" if ideal is None else f"{max(0.0, 1 - ideal / median):.1%}"
        spread = ("" if ideal is None else
                  f"{max(0.0, 1 - ideal / min(warm)):.1%}–{max(0.0, 1 - ideal / max(warm)):.1%}")
        first = statistics.median(r.get("first_wait_s", 0.0) for r in mine[1:])
        after = ("" if ideal_rest is None else
                 f"{max(0.0, 1 - ideal_rest / statistics.median(map(rest, mine[1:]))):.1%}")
        lines.append(f"| {way} | {mine[0]['seconds']} | {len(warm)} | {median:.3f} | {stall} | {spread} "
                     f"| {first:.3f} | {after} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--samples", type=int, default=12000)
    parser.add_argument("--side", type=int, default=144, help="image side (3 x side² bytes)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per cache way")
    parser.add_argument("--ways", default="memory,s3-direct,cache-dir-per-sample,cache-dir,"
                        "cache-redis-per-sample,cache-redis")
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    ways = opts.ways.split(",")
    results: dict[str, Any] = {"options": {k: str(v) for k, v in vars(opts).items()},
                               "torch": torch.__version__, "rows": []}
    if opts.device == "cuda":
        results["gpu"] = torch.cuda.get_device_name()

    def save() -> None:
        (opts.out / "results.json").write_text(json.dumps(results, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        testbin = locate()
        s3 = start_s3(testbin, Path(tmp) / "s3")
        redis: dict[int, Any] = {}  # io-threads -> its redis-server
        try:
            bucket = s3.make_bucket("train")
            t0 = time.perf_counter()
            keys, blobs = upload(s3, bucket, "imgs", opts)
            results["upload_seconds"] = round(time.perf_counter() - t0, 2)
            results["dataset_bytes"] = sum(map(len, blobs))
            print(f"cache_epochs: uploaded {len(keys)} samples, {results['dataset_bytes'] / 1e6:.0f} MB "
                  f"in {results['upload_seconds']} s", flush=True)
            trainer = Trainer(opts)
            trainer.epochs("warm-up", MemorySamples(blobs[: opts.batch * 4]), 1)
            uri = f"s3://{bucket}/imgs"
            for way in ways:
                if way == "memory":
                    rows = trainer.epochs(way, MemorySamples(blobs), opts.epochs)
                elif way == "s3-direct":
                    rows = trainer.epochs(way, S3Samples(bucket, keys, s3.client_options()), opts.epochs)
                elif way.startswith("cache-"):
                    per_sample = way.endswith("-per-sample")
                    base, _, group = way.partition("-group")  # cache-redis-group32: 32 a request
                    if group and not group.isdigit():
                        raise SystemExit(f"way {way!r}: -groupN needs a number")
                    # each way its own empty tier
                    prefix = "bench1" if per_sample else f"bench-g{group}" if group else "bench"
                    if way.startswith("cache-dir"):
                        url = f"dir://{tmp}/tier-{prefix}"
                    else:
                        # cache-redis-io4: a server of its own with 4 I/O threads
                        io = int(base.removeprefix("cache-redis").removesuffix("-per-sample")
                                 .removeprefix("-io") or 1)
                        try:
                            if io not in redis:
                                redis[io] = start_redis_node(testbin, Path(tmp) / f"redis-io{io}",
                                                             maxmemory="16gb", io_threads=io)
                        except Exception as exc:  # noqa: BLE001 - a way left out, said so
                            results.setdefault("skipped", {})[way] = str(exc)[:500]
                            print(f"cache_epochs: {way} left out: {exc}", flush=True)
                            continue
                        url = redis[io].url
                    tier = open_tier(url, budget_bytes=1 << 40, prefix=prefix)
                    name = way.replace("cache-", "imgs-")
                    # what `alnair dataset add` does before hydrating: readers write back
                    tier.set_meta(name, {"source": uri, "include": "[]", "exclude": "[]",
                                         "phase": "hydrating", "budget_bytes": str(1 << 40)})
                    samples = CachedSamples(name, tier_url=url, prefix=prefix,
                                            s3_options=s3.client_options())
                    first = samples.reader.files()[0]
                    assert samples.reader.read(first) == blobs[0], "cache returned other bytes"
                    fed = (PerSample(samples) if per_sample
                           else Grouped(samples, int(group)) if group else samples)
                    rows = trainer.epochs(way, fed, opts.epochs, after_epoch=lambda t=tier: {
                        "tier_chunks": t.usage().chunks, "tier_bytes": t.usage().stored_bytes})
                    samples.close()
                    tier.close()
                else:
                    raise SystemExit(f"unknown way {way!r}")
                results["rows"] += rows
                save()
            trainer.gpu.close()
        finally:
            for node in redis.values():
                node.process.stop()
            s3.stop()
    # the ideal: memory epochs after the first (the first also starts the loader's workers)
    memory = [r["seconds"] for r in results["rows"] if r["way"] == "memory"]
    ideal = statistics.median(memory[1:] or memory) if memory else None
    results["ideal_epoch_seconds"] = ideal
    lines = ["| way | epoch | s | samples/s | wait | stall vs memory | GPU util % |",
             "|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        stall = "" if ideal is None else f"{max(0.0, 1 - ideal / r['seconds']):.1%}"
        r["stall_fraction"] = None if ideal is None else round(max(0.0, 1 - ideal / r["seconds"]), 4)
        lines.append(f"| {r['way']} | {r['epoch']} | {r['seconds']} | {r['samples_per_s']} | "
                     f"{r['wait_fraction']:.1%} | {stall} | {r['gpu_util_mean']} |")
    lines += ["", *warm_summary(results["rows"], ideal)]
    save()
    (opts.out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
