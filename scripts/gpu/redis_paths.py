"""Issue #16: why a batch's samples in one Redis pipeline stall training more than one GET
each on a 16-core host (docs/benchmarks.md, twenty-first session). No GPU and no training:
P processes read random batches of B samples of S bytes from one redis-server, each way,
and each batch is collated as ``cache_epochs.py`` does (the bytes joined, copied into an
array). Reports batches a second, all processes together, and the median batch's latency.

Ways: ``each`` (one GET a sample), ``pipe`` (one pipeline a batch), ``pipeN`` (N samples a
pipeline), ``threadsK`` (the batch split over K threads, one pipeline each), each with the
hiredis parser; ``-py`` after a way uses redis-py's own parser.

    ALNAIR_TESTBIN=$(bash scripts/gpu/testbin_carried.sh) bash scripts/gpu/repo_env.sh \
        python3 scripts/gpu/redis_paths.py --procs 1,8,16
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import redis
from redis._parsers import _RESP2Parser

from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.testbin import locate


def client(url: str, way: str) -> redis.Redis:
    extra = {"parser_class": _RESP2Parser} if way.endswith("-py") else {}
    return redis.Redis.from_url(url, **extra)


def fetch(r: redis.Redis, keys: list[str], way: str, pool: ThreadPoolExecutor | None) -> list[bytes]:
    base = way.removesuffix("-py")
    if base == "each":
        return [r.get(k) for k in keys]
    if base.startswith("threads"):
        n = int(base.removeprefix("threads"))
        step = -(-len(keys) // n)
        parts = [keys[i:i + step] for i in range(0, len(keys), step)]
        assert pool is not None
        return [b for got in pool.map(lambda p: fetch(r, p, "pipe", None), parts) for b in got]
    n = int(base.removeprefix("pipe") or len(keys))
    out: list[bytes] = []
    for lo in range(0, len(keys), n):
        pipe = r.pipeline(transaction=False)
        for k in keys[lo:lo + n]:
            pipe.get(k)
        out += pipe.execute()
    return out


def worker(url: str, way: str, count: int, batch: int, seconds: float, seed: int,
           out: mp.Queue) -> None:
    r = client(url, way)
    pool = ThreadPoolExecutor(8) if way.startswith("threads") else None
    rng = random.Random(seed)
    lat: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        keys = [f"s:{rng.randrange(count)}" for _ in range(batch)]
        t = time.perf_counter()
        blobs = fetch(r, keys, way, pool)
        raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
        raw[:, 1:].copy()  # the collate's copy into the batch tensor
        lat.append(time.perf_counter() - t)
    out.put(lat)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--procs", default="1,8,16")
    p.add_argument("--ways", default="each,pipe,pipe32,pipe8,threads4,pipe-py,each-py")
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--size", type=int, default=62209)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seconds", type=float, default=4.0)
    o = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        node = start_redis_node(locate(), Path(tmp) / "redis", maxmemory="4gb")
        try:
            r = redis.Redis.from_url(node.url)
            blob = bytes(random.Random(0).randbytes(o.size))
            for lo in range(0, o.samples, 256):
                pipe = r.pipeline(transaction=False)
                for i in range(lo, min(lo + 256, o.samples)):
                    pipe.set(f"s:{i}", blob)
                pipe.execute()
            print(f"{o.samples} samples of {o.size} B, batch {o.batch}, {o.seconds} s a cell")
            print("procs  way         batches/s  samples/s  MB/s   median batch ms")
            for procs in [int(x) for x in o.procs.split(",")]:
                for way in o.ways.split(","):
                    q: mp.Queue = mp.Queue()
                    ps = [mp.Process(target=worker, args=(node.url, way, o.samples, o.batch,
                                                          o.seconds, s, q)) for s in range(procs)]
                    for x in ps:
                        x.start()
                    lats = [q.get() for _ in ps]
                    for x in ps:
                        x.join()
                    n = sum(len(x) for x in lats)
                    rate = n / o.seconds
                    med = statistics.median([v for x in lats for v in x]) * 1000
                    print(f"{procs:5d}  {way:10s} {rate:9.1f} {rate * o.batch:10.0f} "
                          f"{rate * o.batch * o.size / 1e6:6.0f}   {med:8.1f}", flush=True)
        finally:
            node.process.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
