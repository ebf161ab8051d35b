"""Hydration throughput, S3 (versitygw) → Redis, by files hydrated at once.

Runs the hydrator's own Hydration (no bus: statuses are dropped) over 2,000 files of
16 KiB and 8 shards of 16 MiB, each into an empty tier, for each ``--threads`` value.

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/cache_hydrator/bench/hydrate_bench.py --threads 1 4 8
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

from alnair_cache_hydrator import DatasetSpec, DatasetStatus, Phase
from alnair_cache_hydrator._hydration import Hydration
from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.s3 import start_s3
from alnair_common.testing.testbin import locate
from alnair_dataset import RedisTier, connect, open_source

MIB = 1 << 20


async def hydrate(spec: DatasetSpec, tier: RedisTier, s3_options: dict, threads: int) -> float:
    async def drop(_status: DatasetStatus) -> None:
        return None

    hydration = Hydration(DatasetStatus(spec, Phase.PENDING), lambda: tier,
                          lambda: open_source(spec.source, s3_options=s3_options), drop,
                          threads=threads)
    started = time.perf_counter()
    final = await hydration.run()
    assert final.phase is Phase.READY, final.message
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    rng = random.Random(1)
    sets = {"2,000 x 16 KiB": {f"s/{i:05d}.jpg": rng.randbytes(16 << 10) for i in range(2000)},
            "8 x 16 MiB": {f"l/{i:03d}.tar": rng.randbytes(16 * MIB) for i in range(8)}}
    with tempfile.TemporaryDirectory() as tmp:
        testbin = locate()
        s3 = start_s3(testbin, Path(tmp) / "s3")
        redis = start_redis_node(testbin, Path(tmp) / "redis", maxmemory="1gb")
        try:
            bucket = s3.make_bucket()
            client = s3.client()
            for files in sets.values():
                for key, data in files.items():
                    client.put_object(Bucket=bucket, Key=f"h/{key}", Body=data)
            print("| data set | files at once | seconds | MB/s | files/s |\n|---|---|---|---|---|")
            for title, files in sets.items():
                prefix = next(iter(files)).split("/")[0]
                size = sum(map(len, files.values()))
                for threads in args.threads:
                    connect(redis.url).flushall()
                    tier = RedisTier(connect(redis.url), budget_bytes=1 << 40, prefix="h")
                    spec = DatasetSpec(f"bench-{threads}", f"s3://{bucket}/h/{prefix}")
                    took = asyncio.run(hydrate(spec, tier, s3.client_options(), threads))
                    print(f"| {title} | {threads} | {took:.2f} | {size / took / 1e6:,.0f} | "
                          f"{len(files) / took:,.0f} |")
        finally:
            redis.process.stop()
            s3.stop()


if __name__ == "__main__":
    main()
