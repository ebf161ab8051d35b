"""A warm epoch's first batch when the reader lacks the batch's manifest entries.

A DataLoader worker keeps the manifest entries it has seen; in the epoch after the one that
filled the tier (readers writing back their misses), ~7/8 of a batch's files were written
by the other workers, so the worker must ask the tier for their entries before it can ask
for their chunks. This times one ``read_many`` of a batch from a redis-server the bench
starts itself, the entries asked for two ways, interleaved over the rounds:

* ``per-file HGET``: one round trip per file (how the reader asked before ``file_entries``);
* ``one HMGET``: the batch's entries in one request (``RedisTier.file_entries``).

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/cache_hydrator/bench/lookup_bench.py --files 2048 --batch 256
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.testbin import locate
from alnair_dataset import Budget, CacheTier, DatasetReader, open_source, open_tier, store_file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=2048)
    ap.add_argument("--size", type=int, default=62_000, help="bytes a file (an image sample)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "src")
        src.mkdir()
        for i in range(a.files):
            (src / f"{i:06d}.bin").write_bytes(os.urandom(a.size))
        node = start_redis_node(locate(), Path(tmp, "redis"), maxmemory="8gb")
        try:
            uri = f"file://{src}"
            tier = open_tier(node.url, budget_bytes=1 << 40, prefix="bench")
            tier.set_meta("ds", {"source": uri, "include": "[]", "exclude": "[]",
                                 "phase": "ready", "budget_bytes": str(1 << 40)})
            source = open_source(uri)
            for f in source.list():
                store_file(tier, "ds", source, f, Budget(tier))
            times: dict[str, list[float]] = {"per-file HGET": [], "one HMGET": []}
            for rnd in range(a.rounds):
                for way, seconds in times.items():
                    with DatasetReader("ds", tier_url=node.url, prefix="bench", write_back=False) as reader:
                        if way == "per-file HGET":  # the interface's default: file_entry each
                            reader.tier.file_entries = partial(CacheTier.file_entries, reader.tier)
                        batch = random.Random(rnd).sample(reader.files(), a.batch)
                        reader._manifest.clear()  # a worker that wrote none of the batch
                        t0 = time.perf_counter()
                        got = reader.read_many(batch)
                        seconds.append(time.perf_counter() - t0)
                        assert reader.stats.misses == 0 and len(got) == a.batch
            for way, seconds in times.items():
                print(f"{way}: median {statistics.median(seconds) * 1e3:.1f} ms, "
                      f"min {min(seconds) * 1e3:.1f} ms over {a.rounds} rounds "
                      f"({a.batch} files of {a.size} B)")
        finally:
            node.process.stop()


if __name__ == "__main__":
    main()
