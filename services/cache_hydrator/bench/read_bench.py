"""Read throughput of the data client: cold and warm, against S3 directly and raw Redis.

Starts its own versitygw (S3) and redis-server from the test-binary cache
(``scripts/testbin``), uploads two data sets — many small files and a few large shards —
and reads each, with the same number of threads, these ways, interleaved over the rounds:

* ``S3 direct``: boto3 ``get_object`` per file (what training code does without a cache);
* ``alnair cold``: DatasetReader on an empty tier, Redis or a directory (misses read S3 and
  are written back): the time until every file was read (what the training loop waits for),
  and until the write-backs were done too; "next epoch hits" is the share of files a new
  reader then finds in the tier (lowest of the rounds);
* ``alnair warm``: DatasetReader once the data set is in the tier (every read a hit), on one
  redis-server, on a Redis Cluster of three servers and on a directory tier (``dir://``,
  files in the page cache: what a node-local disk tier gives);
* ``alnair warm, boto3 through the S3 gateway``: the same hits, read by unchanged boto3 code
  pointed at ``alnair_dataset.s3_gateway`` in a process of its own (what a pod's S3 client
  gets from the webhook: the gateway as its sidecar);
* ``alnair warm, batches of 64``: the same hits read 64 files per call
  (``DatasetReader.read_many``, what a DataLoader batch calls through ``CachedSamples``): one
  tier request per batch instead of one per file;
* ``raw Redis``: the tier's own client GETting the file's chunks, with no Alnair code
  in between (the ceiling for the warm case), on the one server and on the cluster;
* ``local files``: the same bytes as plain files in the page cache, read with
  ``open().read()``: what no tier on this machine can beat (a directory tier's ceiling).

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/cache_hydrator/bench/read_bench.py --threads 8 --rounds 3

"CPU" is this process's CPU time per file (every thread: boto3, the tier's client, hashing),
which moves less than wall time when other work shares the machine; the servers' is not in it.

Both servers run on this machine's loopback and the S3 server's files sit in the page
cache, so "S3 direct" here is far faster than a real object store over a network: the
warm/direct ratio measured here is a lower bound of what a remote bucket would show.
``--s3-link 20,90`` puts a remote store's link between the readers and the S3 server
(``s3_link.py``: 20 ms a response, 90 MB/s a connection) for S3 direct and the cold
epochs' misses; the data sets are uploaded and hydrated around it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config
from s3_link import start_link

from alnair_common.natsd import free_port
from alnair_common.testing.redis_cluster import start_redis_cluster, start_redis_node
from alnair_common.testing.s3 import start_s3
from alnair_common.testing.testbin import locate
from alnair_dataset import Budget, DatasetReader, RedisTier, connect, open_source, open_tier, store_file

MIB = 1 << 20
Row = tuple[str, float, float]
Measured = tuple[str, float, float, float]  # a row and this process's CPU seconds per file
BATCH = 64


@dataclass(frozen=True)
class Batched:
    """A way that reads ``size`` files per call, as a DataLoader batch does."""

    read_many: Callable[[list[str]], list[bytes]]
    size: int = BATCH

    def __call__(self, paths: list[str]) -> list[bytes]:
        return self.read_many(paths)


Read = Callable[[str], bytes] | Batched


def measured(label: str, paths: list[str], read: Read, threads: int,
             expected: dict[str, bytes]) -> Measured:
    started = time.process_time()
    row = timed(label, paths, read, threads, expected)
    return *row, (time.process_time() - started) / len(paths)


def timed(label: str, paths: list[str], read: Read, threads: int,
          expected: dict[str, bytes] | None = None) -> Row:
    started = time.perf_counter()
    total = 0
    with ThreadPoolExecutor(threads) as pool:
        if isinstance(read, Batched):
            groups = [paths[i:i + read.size] for i in range(0, len(paths), read.size)]
            got = (data for batch in pool.map(read, groups) for data in batch)
        else:
            got = pool.map(read, paths)
        for path, data in zip(paths, got, strict=True):
            total += len(data)
            if expected is not None and data != expected[path]:
                raise AssertionError(f"{label}: {path} differs from the source")
    elapsed = time.perf_counter() - started
    return label, total / elapsed / 1e6, len(paths) / elapsed


def cold_epoch(tier_name: str, url: str, uri: str, files: dict[str, bytes], threads: int,
               s3_options: dict) -> tuple[Measured, Measured, float]:
    """One epoch on an empty tier: rows until read and until written back; next epoch's hits."""
    tier = open_tier(url, budget_bytes=1 << 40, prefix="c")
    tier.set_meta("cold", {"source": uri, "include": "[]", "exclude": "[]", "phase": "hydrating",
                           "budget_bytes": str(1 << 40)})
    paths = sorted(files)
    label = f"alnair cold, {tier_name} (miss + write-back)"
    with DatasetReader("cold", tier_url=url, prefix="c", threads=threads, s3_options=s3_options) as reader:
        read_row = measured(label, paths, reader.read, threads, files)
        started, cpu = time.perf_counter(), time.process_time()
        reader.flush()
        waited, cpu = time.perf_counter() - started, time.process_time() - cpu
    seconds = len(paths) / read_row[2] + waited
    written_row = (f"{label}, until written back", sum(map(len, files.values())) / seconds / 1e6,
                   len(paths) / seconds, read_row[3] + cpu / len(paths))
    with DatasetReader("cold", tier_url=url, prefix="c", write_back=False, s3_options=s3_options) as nxt:
        timed("next epoch", paths, nxt.read, threads, files)
        hits = nxt.stats.hits / len(paths)
    tier.close()
    return read_row, written_row, hits


def hydrate(url: str, name: str, uri: str, s3_options: dict) -> None:
    """Put the data set ``uri`` into the tier ``url`` as the hydrator would."""
    tier = open_tier(url, budget_bytes=1 << 40, prefix="b")
    source = open_source(uri, s3_options=s3_options)
    tier.set_meta(name, {"source": uri, "include": "[]", "exclude": "[]", "phase": "hydrating",
                         "budget_bytes": str(1 << 40)})
    budget = Budget(tier)
    for file in source.list():
        store_file(tier, name, source, file, budget)
    tier.set_meta(name, {"phase": "ready"})
    tier.close()


def arguments(doc: str, *, small: int) -> argparse.Namespace:
    """The options every read benchmark takes (``small``: the default number of small files)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--small", type=int, default=small, help="16 KiB files")
    parser.add_argument("--shards", type=int, default=8, help="16 MiB shards")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats (median)")
    parser.add_argument("--s3-link", default="", metavar="MS,MBPS",
                        help="read S3 through a link of this latency and per-connection bandwidth "
                             "(s3_link.py; e.g. 20,90); default: loopback")
    return parser.parse_args()


def data_sets(small: int, shards: int) -> dict[str, dict[str, bytes]]:
    """Title -> {path: bytes}: many small files (s/...) and a few large shards (l/...)."""
    rng = random.Random(1)
    return {"small files (16 KiB)": {f"s/{i:05d}.jpg": rng.randbytes(16 << 10)
                                     for i in range(small)},
            "large shards (16 MiB)": {f"l/{i:03d}.tar": rng.randbytes(16 * MIB)
                                      for i in range(shards)}}


def start_gateway(name: str, url: str, s3: dict) -> tuple[subprocess.Popen[bytes], str]:
    """The S3 gateway in a process of its own, as the pod's sidecar runs it."""
    port = free_port()
    env = {**os.environ, "ALNAIR_CACHE_TIER_URL": url, "ALNAIR_CACHE_PREFIX": "b",
           "AWS_ENDPOINT_URL_S3": s3["endpoint_url"], "AWS_ACCESS_KEY_ID": s3["aws_access_key_id"],
           "AWS_SECRET_ACCESS_KEY": s3["aws_secret_access_key"], "AWS_DEFAULT_REGION": s3["region_name"]}
    process = subprocess.Popen([sys.executable, "-m", "alnair_dataset.s3_gateway", "--dataset", name,
                                "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the S3 gateway did not start") from None
            time.sleep(0.1)


def main() -> None:
    args = arguments(__doc__, small=2000)
    sets = data_sets(args.small, args.shards)
    with tempfile.TemporaryDirectory() as tmp:
        testbin = locate()
        s3 = start_s3(testbin, Path(tmp) / "s3")
        redis = start_redis_node(testbin, Path(tmp) / "redis", maxmemory="1gb")
        cluster = start_redis_cluster(testbin, Path(tmp) / "cluster", maxmemory="1gb")
        link = None
        try:
            bucket = s3.make_bucket()
            client = s3.client()
            for files in sets.values():
                for key, data in files.items():
                    client.put_object(Bucket=bucket, Key=f"bench/{key}", Body=data)
            options = s3.client_options()
            read_options = options  # what S3 direct and the cold epochs' misses read through
            if args.s3_link:
                latency_ms, mbps = (int(v) for v in args.s3_link.split(","))
                link = start_link(options["endpoint_url"], latency_ms, mbps)
                read_options = {**options, "endpoint_url": link.url}
                print(f"S3 read through a link of {latency_ms} ms a response, {mbps} MB/s a connection")
            direct = boto3.session.Session().client(
                "s3", **read_options, config=Config(max_pool_connections=args.threads + 2))
            print("| data set | way | MB/s | files/s | CPU ms/file | next epoch hits |\n"
                  "|---|---|---|---|---|---|")
            for title, files in sets.items():
                name = "ds" + str(len(files))
                prefix = next(iter(files)).split("/")[0]
                uri = f"s3://{bucket}/bench/{prefix}"
                rel = {p.split("/", 1)[1]: d for p, d in files.items()}
                hydrate(redis.url, name, uri, options)
                warm_dir = Path(tmp) / f"warm-{prefix}"
                for url in (redis.url, cluster.url, f"dir://{warm_dir}"):
                    hydrate(url, name, uri, options)
                manifest = RedisTier(connect(redis.url), budget_bytes=1 << 40, prefix="b").manifest(name)

                def raw_read(path: str, raw, manifest=manifest) -> bytes:  # raw: a Redis or cluster client
                    chunks = manifest[path].chunks
                    if len(chunks) == 1:
                        c = chunks[0]
                        return raw.get(f"b:chunk:{{{c[:2]}}}:{c}")
                    pipe = raw.pipeline(transaction=False)
                    for c in manifest[path].chunks:
                        pipe.get(f"b:chunk:{{{c[:2]}}}:{c}")
                    return b"".join(pipe.execute())

                cold_dbs = connect(f"{redis.url}/1")  # the cold epochs' Redis tier, emptied each round
                cold_dir = Path(tmp) / "cold-tier"
                warm, warm_cluster, warm_dir_tier = (
                    DatasetReader(name, tier_url=url, prefix="b", threads=args.threads, write_back=False)
                    for url in (redis.url, cluster.url, f"dir://{warm_dir}"))
                raw, raw_cluster = connect(redis.url), connect(cluster.url)
                local = Path(tmp) / f"local-{prefix}"
                for path, data in rel.items():
                    (local / path).parent.mkdir(parents=True, exist_ok=True)
                    (local / path).write_bytes(data)
                gateway, gateway_url = start_gateway(name, redis.url, options)
                via_gateway = boto3.session.Session().client(
                    "s3", **{**options, "endpoint_url": gateway_url},
                    config=Config(max_pool_connections=args.threads + 2))
                ways: dict[str, Read] = {
                    "S3 direct": lambda p, key=f"bench/{prefix}": direct.get_object(
                        Bucket=bucket, Key=f"{key}/{p}")["Body"].read(),
                    "alnair warm": warm.read,
                    f"alnair warm, batches of {BATCH}": Batched(warm.read_many),
                    "alnair warm, Redis Cluster (3 servers)": warm_cluster.read,
                    f"alnair warm, Redis Cluster, batches of {BATCH}": Batched(warm_cluster.read_many),
                    "alnair warm, directory tier": warm_dir_tier.read,
                    "alnair warm, boto3 through the S3 gateway":
                        lambda p, key=f"bench/{prefix}", c=via_gateway: c.get_object(
                            Bucket=bucket, Key=f"{key}/{p}")["Body"].read(),
                    "raw Redis (tier's client, no Alnair)": lambda p, raw=raw: raw_read(p, raw),
                    "raw Redis Cluster": lambda p, raw=raw_cluster: raw_read(p, raw),
                    "local files (page cache, open().read())": lambda p, root=local: (root / p).read_bytes()}
                runs: dict[str, list[Measured]] = {}
                hits: dict[str, float] = {}
                for _ in range(args.rounds):  # interleaved, so drift hits every way alike
                    for label, read in ways.items():
                        runs.setdefault(label, []).append(measured(label, sorted(rel), read, args.threads, rel))
                    cold_dbs.flushdb()
                    shutil.rmtree(cold_dir, ignore_errors=True)
                    for tier_name, url in (("Redis", f"{redis.url}/1"), ("directory", f"dir://{cold_dir}")):
                        read_row, written_row, hit = cold_epoch(tier_name, url, uri, rel, args.threads,
                                                                read_options)
                        runs.setdefault(read_row[0], []).append(read_row)
                        runs.setdefault(written_row[0], []).append(written_row)
                        hits[read_row[0]] = min(hits.get(read_row[0], 1.0), hit)
                for reader in (warm, warm_cluster, warm_dir_tier):
                    assert reader.stats.misses == 0, "a warm read missed"
                    reader.close()
                via_gateway.close()
                gateway.terminate()
                gateway.wait(30)
                for label, rows in runs.items():
                    _, mbs, fps, _ = sorted(rows, key=lambda x: x[1])[len(rows) // 2]
                    cpu = sorted(r[3] for r in rows)[len(rows) // 2]
                    hit = f"{hits[label]:.1%}" if label in hits else ""
                    print(f"| {title} | {label} | {mbs:,.0f} | {fps:,.0f} | {cpu * 1e3:.2f} | {hit} |")
            direct.close()
        finally:
            if link is not None:
                link.stop()
            cluster.stop()
            redis.process.stop()
            s3.stop()


if __name__ == "__main__":
    main()
