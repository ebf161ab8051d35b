"""Warm read throughput of the data client on the Alluxio tier, next to the Redis tier.

Starts a redis-server and a real Alluxio 2.9 (master + worker + proxy, the test harness's
:mod:`alnair_common.testing.alluxio`) from the test-binary cache, hydrates the same two data
sets into both tiers (many small files, a few large shards; from a local directory, so the
source costs nothing), then reads each, with the same threads, interleaved over rounds:

* ``alnair warm (Redis)``: DatasetReader on the Redis tier, every read a hit;
* ``alnair warm (Alluxio)``: DatasetReader on the Alluxio tier, every read a hit;
* ``raw Alluxio REST``: the proxy's REST API read with ``requests`` and no Alnair code
  (open-file, read, close per chunk): the ceiling of the Alluxio case;
* ``raw Alluxio S3 API``: the proxy's S3 GetObject with boto3, one call per chunk, for the
  other API the proxy offers (what the tier would gain by reading through it).

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/cache_hydrator/bench/alluxio_read_bench.py --threads 8

Every byte read is compared with the source.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from read_bench import arguments, data_sets, timed

from alnair_common.testing.alluxio import start_alluxio
from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.testbin import locate
from alnair_dataset import Budget, DatasetReader, open_source, open_tier, store_file


def hydrate(url: str, name: str, uri: str, threads: int) -> float:
    """Seconds to put the data set ``uri`` into the tier ``url`` as the hydrator would."""
    tier = open_tier(url, budget_bytes=1 << 40, prefix="b")
    source = open_source(uri)
    tier.set_meta(name, {"source": uri, "include": "[]", "exclude": "[]", "phase": "hydrating",
                         "budget_bytes": str(1 << 40)})
    started = time.perf_counter()
    budget = Budget(tier)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda f: store_file(tier, name, source, f, budget), source.list()))
    elapsed = time.perf_counter() - started
    tier.set_meta(name, {"phase": "ready"})
    tier.close()
    return elapsed


def main() -> None:
    args = arguments(__doc__, small=500)
    sets = data_sets(args.small, args.shards)
    with tempfile.TemporaryDirectory() as tmp:
        testbin = locate()
        redis = start_redis_node(testbin, Path(tmp) / "redis", maxmemory="1gb")
        alluxio = start_alluxio(testbin, Path(tmp) / "alluxio", capacity="1GB")
        try:
            urls = {"Redis": redis.url, "Alluxio": alluxio.root("bench")}
            print("| data set | way | MB/s | files/s |\n|---|---|---|---|")
            for title, files in sets.items():
                for path, data in files.items():
                    (Path(tmp) / "src" / path).parent.mkdir(parents=True, exist_ok=True)
                    (Path(tmp) / "src" / path).write_bytes(data)
                prefix = next(iter(files)).split("/")[0]
                uri = f"file://{tmp}/src/{prefix}"
                rel = {p.split("/", 1)[1]: d for p, d in files.items()}
                name = "ds" + prefix
                for tier_name, url in urls.items():
                    seconds = hydrate(url, name, uri, args.threads)
                    print(f"| {title} | hydrate into {tier_name} ({args.threads} files at once) | "
                          f"{sum(map(len, rel.values())) / seconds / 1e6:,.0f} | "
                          f"{len(rel) / seconds:,.0f} |")
                alluxio_tier = open_tier(urls["Alluxio"], budget_bytes=1 << 40, prefix="b")
                manifest = alluxio_tier.manifest(name)
                rest, root = alluxio_tier.rest, alluxio_tier.root
                s3 = _s3_client(alluxio.rest)
                bucket, key_root = root.strip("/").split("/", 1)

                def raw_rest(path: str, manifest=manifest, rest=rest, root=root) -> bytes:
                    return b"".join(rest.read(f"{root}/chunks/{c}") for c in manifest[path].chunks)

                def raw_s3(path: str, manifest=manifest, s3=s3, bucket=bucket,
                           key_root=key_root) -> bytes:
                    return b"".join(s3.get_object(Bucket=bucket, Key=f"{key_root}/chunks/{c}")
                                    ["Body"].read() for c in manifest[path].chunks)

                readers = {t: DatasetReader(name, tier_url=u, prefix="b", threads=args.threads,
                                            write_back=False) for t, u in urls.items()}
                ways: dict[str, Callable[[str], bytes]] = {
                    "alnair warm (Redis)": readers["Redis"].read,
                    "alnair warm (Alluxio)": readers["Alluxio"].read,
                    "raw Alluxio REST (requests, no Alnair)": raw_rest,
                    "raw Alluxio S3 API (boto3, no Alnair)": raw_s3}
                runs: dict[str, list[tuple[str, float, float]]] = {k: [] for k in ways}
                for _ in range(args.rounds):  # interleaved, so drift hits every way alike
                    for label, read in ways.items():
                        runs[label].append(timed(label, sorted(rel), read, args.threads, rel))
                for reader in readers.values():
                    assert reader.stats.misses == 0, "a warm read missed"
                    reader.close()
                alluxio_tier.close()
                for r in runs.values():
                    label, mbs, fps = sorted(r, key=lambda x: x[1])[len(r) // 2]
                    print(f"| {title} | {label} | {mbs:,.0f} | {fps:,.0f} |")
        finally:
            alluxio.stop()
            redis.process.stop()


def _s3_client(rest: str):
    """boto3 on the proxy's S3 API (v1 handler): the access key names the user, unsigned."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=f"{rest}/s3", aws_access_key_id="alnair",
                        aws_secret_access_key="unused", region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


if __name__ == "__main__":
    main()
