"""Read throughput through the FUSE mount, next to the data client and the source directly.

Starts a redis-server from the test-binary cache, writes two data sets into a local
directory (many small files, a few large shards), hydrates both into Redis, then reads each
with the same threads, interleaved over rounds (medians), every byte compared:

* ``source directly``: ``open().read()`` of the source directory (in the page cache: the
  ceiling, what a hostPath read costs without any cache);
* ``reader directly``: ``DatasetReader.read`` on the Redis tier, every read a hit;
* ``mount, first read``: ``open().read()`` through ``alnair-dataset-mount`` on the same tier,
  remounted each round so the kernel's page cache holds nothing (FUSE + reader + Redis);
* ``mount, re-read``: the same files again on that mount (``kernel_cache``: the page cache
  serves them, FUSE is not asked).

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/cache_hydrator/bench/mount_bench.py --threads 8 --rounds 3
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from alluxio_read_bench import hydrate
from read_bench import arguments, data_sets, timed

from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.testbin import locate
from alnair_dataset import DatasetReader, spawn_mount, unmount


def main() -> None:
    args = arguments(__doc__, small=2000)
    sets = data_sets(args.small, args.shards)
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis_node(locate(), Path(tmp) / "redis", maxmemory="1gb")
        try:
            print("| data set | way | MB/s | files/s |\n|---|---|---|---|")
            for title, files in sets.items():
                name = "ds" + str(len(files))
                src = Path(tmp) / name
                for rel, data in files.items():
                    (src / rel).parent.mkdir(parents=True, exist_ok=True)
                    (src / rel).write_bytes(data)
                hydrate(redis.url, name, f"file://{src}", args.threads)
                paths = sorted(files)
                mnt = Path(tmp) / f"mnt-{name}"
                mnt.mkdir()
                runs: dict[str, list[tuple[str, float, float]]] = {}

                def run(label: str, read, paths=paths, files=files, runs=runs) -> None:  # noqa: ANN001
                    runs.setdefault(label, []).append(
                        timed(label, paths, read, args.threads, files))

                with DatasetReader(name, tier_url=redis.url, prefix="b", threads=args.threads,
                                   write_back=False) as reader:
                    for _ in range(args.rounds):
                        run("source directly (open/read, page cache)",
                            lambda p, src=src: (src / p).read_bytes())
                        run("reader directly (DatasetReader.read, Redis warm)", reader.read)
                        spawn_mount([name], mnt, tier_url=redis.url, prefix="b",
                                    log_path=str(Path(tmp) / f"{name}.log"))
                        try:
                            run("mount, first read (FUSE + reader, Redis warm)",
                                lambda p, mnt=mnt: (mnt / p).read_bytes())
                            run("mount, re-read (kernel page cache)",
                                lambda p, mnt=mnt: (mnt / p).read_bytes())
                        finally:
                            unmount(mnt)
                    assert reader.stats.misses == 0
                for r in runs.values():
                    label, mbs, fps = sorted(r, key=lambda x: x[1])[len(r) // 2]
                    print(f"| {title} | {label} | {mbs:,.0f} | {fps:,.0f} |")
        finally:
            redis.process.stop()


if __name__ == "__main__":
    main()
