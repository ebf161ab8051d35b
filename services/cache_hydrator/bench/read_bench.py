"""Read throughput of the data client: cold and warm, against S3 directly and raw Redis.

Starts its own versitygw (S3) and redis-server from the test-binary cache
(``scripts/testbin``), uploads two data sets — many small files and a few large shards —
and reads each, with the same number of threads, four ways, in one run:

* ``S3 direct``: boto3 ``get_object`` per file (what training code does without a cache);
* ``alnair cold``: DatasetReader on an empty tier (misses read S3 and are written back);
* ``alnair warm``: DatasetReader once the data set is in the tier (every read a hit);
* ``raw Redis``: the tier's own client GETting the file's chunks, with no Alnair code
  in between (the ceiling for the warm case).

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/cache_hydrator/bench/read_bench.py --threads 8

Both servers run on this machine's loopback and the S3 server's files sit in the page
cache, so "S3 direct" here is far faster than a real object store over a network: the
warm/direct ratio measured here is a lower bound of what a remote bucket would show.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.s3 import start_s3
from alnair_common.testing.testbin import locate
from alnair_dataset import DatasetReader, RedisTier, connect

MIB = 1 << 20


def timed(label: str, paths: list[str], read: Callable[[str], bytes], threads: int,
          expected: dict[str, bytes] | None = None) -> tuple[str, float, float]:
    started = time.perf_counter()
    total = 0
    with ThreadPoolExecutor(threads) as pool:
        for path, data in zip(paths, pool.map(read, paths), strict=True):
            total += len(data)
            if expected is not None and data != expected[path]:
                raise AssertionError(f"{label}: {path} differs from the source")
    elapsed = time.perf_counter() - started
    return label, total / elapsed / 1e6, len(paths) / elapsed


def arguments(doc: str, *, small: int) -> argparse.Namespace:
    """The options every read benchmark takes (``small``: the default number of small files)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--small", type=int, default=small, help="16 KiB files")
    parser.add_argument("--shards", type=int, default=8, help="16 MiB shards")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats (median)")
    return parser.parse_args()


def data_sets(small: int, shards: int) -> dict[str, dict[str, bytes]]:
    """Title -> {path: bytes}: many small files (s/...) and a few large shards (l/...)."""
    rng = random.Random(1)
    return {"small files (16 KiB)": {f"s/{i:05d}.jpg": rng.randbytes(16 << 10)
                                     for i in range(small)},
            "large shards (16 MiB)": {f"l/{i:03d}.tar": rng.randbytes(16 * MIB)
                                      for i in range(shards)}}


def main() -> None:
    args = arguments(__doc__, small=2000)
    sets = data_sets(args.small, args.shards)
    with tempfile.TemporaryDirectory() as tmp:
        testbin = locate()
        s3 = start_s3(testbin, Path(tmp) / "s3")
        redis = start_redis_node(testbin, Path(tmp) / "redis", maxmemory="1gb")
        try:
            bucket = s3.make_bucket()
            client = s3.client()
            for files in sets.values():
                for key, data in files.items():
                    client.put_object(Bucket=bucket, Key=f"bench/{key}", Body=data)
            print("| data set | way | MB/s | files/s |\n|---|---|---|---|")
            for title, files in sets.items():
                name = "ds" + str(len(files))
                prefix = next(iter(files)).split("/")[0]
                uri = f"s3://{bucket}/bench/{prefix}"
                rel = {p.split("/", 1)[1]: d for p, d in files.items()}
                tier = RedisTier(connect(redis.url), budget_bytes=1 << 40, prefix="b")
                tier.set_meta(name, {"source": uri, "include": "[]", "exclude": "[]",
                                     "phase": "hydrating", "budget_bytes": str(1 << 40)})
                with DatasetReader(name, tier_url=redis.url, prefix="b", threads=args.threads,
                                   s3_options=s3.client_options()) as cold:
                    rows = [timed("alnair cold (miss + write-back)", sorted(rel), cold.read,
                                  args.threads, rel)]
                    cold.flush()
                tier.set_meta(name, {"phase": "ready"})
                manifest = tier.manifest(name)
                raw = connect(redis.url)

                def raw_read(path: str, manifest=manifest, raw=raw) -> bytes:
                    chunks = manifest[path].chunks
                    if len(chunks) == 1:
                        c = chunks[0]
                        return raw.get(f"b:chunk:{{{c[:2]}}}:{c}")
                    pipe = raw.pipeline(transaction=False)
                    for c in manifest[path].chunks:
                        pipe.get(f"b:chunk:{{{c[:2]}}}:{c}")
                    return b"".join(pipe.execute())

                warm = DatasetReader(name, tier_url=redis.url, prefix="b", threads=args.threads,
                                     write_back=False)
                ways: dict[str, Callable[[str], bytes]] = {
                    "S3 direct": lambda p, key=f"bench/{prefix}": client.get_object(
                        Bucket=bucket, Key=f"{key}/{p}")["Body"].read(),
                    "alnair warm": warm.read,
                    "raw Redis (tier's client, no Alnair)": raw_read}
                runs: dict[str, list[tuple[str, float, float]]] = {k: [] for k in ways}
                for _ in range(args.rounds):  # interleaved, so drift hits every way alike
                    for label, read in ways.items():
                        runs[label].append(timed(label, sorted(rel), read, args.threads, rel))
                assert warm.stats.misses == 0
                warm.close()
                rows += [sorted(r, key=lambda x: x[1])[len(r) // 2]
                                    for r in runs.values()]
                for label, mbs, fps in rows:
                    print(f"| {title} | {label} | {mbs:,.0f} | {fps:,.0f} |")
        finally:
            redis.process.stop()
            s3.stop()


if __name__ == "__main__":
    main()
