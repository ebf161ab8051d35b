"""Dedup of fixed-size vs content-defined chunking on the data sets users actually share.

Corpus: ``--files`` shards of ``--shard-mib`` MiB of random bytes (incompressible, like
JPEG or token shards). Scenarios, each a list of data sets cached side by side:

* ``same x4``: four users cache the same data set;
* ``overlap``: a second data set holds half of the first's shards plus as many new ones;
* ``edited``: a second version where each shard had 100 bytes inserted at a random place
  (a record added, a header grown): every boundary after the edit shifts;
* ``repacked``: the same samples re-packed into shards of another size (one byte stream
  cut at other places), as when a pipeline re-shards.

Reported: bytes the tier would store (distinct chunks) against the logical bytes, and how
fast each chunker runs here (MB/s of input; content-defined chunking is pure Python).

    .venv/bin/python services/cache_hydrator/bench/dedup_bench.py --files 16 --shard-mib 1
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Iterator

from alnair_dataset import chunk_id, content_defined_chunks, fixed_chunks

MIB = 1 << 20


def scenarios(files: int, shard: int, seed: int) -> dict[str, list[list[bytes]]]:
    rng = random.Random(seed)
    base = [rng.randbytes(shard) for _ in range(files)]
    fresh = [rng.randbytes(shard) for _ in range(files // 2)]
    edited = []
    for data in base:
        at = rng.randrange(len(data))
        edited.append(data[:at] + rng.randbytes(100) + data[at:])
    stream = b"".join(base)
    other = int(shard * 0.7) + 1237  # not a multiple of any chunk size
    repacked = [stream[i:i + other] for i in range(0, len(stream), other)]
    return {
        "same x4": [base] * 4,
        "overlap": [base, base[: files // 2] + fresh],
        "edited": [base, edited],
        "repacked": [base, repacked],
    }


Chunker = Callable[[bytes], Iterator[bytes]]


def chunkers() -> dict[str, Chunker]:
    return {
        "fixed 1 MiB": lambda d: fixed_chunks(d, MIB),
        "fixed 64 KiB": lambda d: fixed_chunks(d, 64 << 10),
        "CDC avg 64 KiB": lambda d: content_defined_chunks(d, average=64 << 10),
    }


def stored(datasets: list[list[bytes]], chunker: Chunker) -> tuple[int, int, float]:
    seen: dict[str, int] = {}
    logical = 0
    hashed = 0
    started = time.perf_counter()
    for dataset in datasets:
        for data in dataset:
            logical += len(data)
            if id(data) in _done:  # the same object chunks the same way: count, do not redo
                for cid, size in _done[id(data)]:
                    seen[cid] = size
                continue
            pieces = [(chunk_id(c), len(c)) for c in chunker(data)]
            hashed += len(data)
            _done[id(data)] = pieces
            for cid, size in pieces:
                seen[cid] = size
    elapsed = time.perf_counter() - started
    return logical, sum(seen.values()), hashed / elapsed / 1e6 if elapsed else 0.0


_done: dict[int, list[tuple[str, int]]] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--shard-mib", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cases = scenarios(args.files, int(args.shard_mib * MIB), args.seed)
    names = list(chunkers())
    print("| scenario | logical MiB | " + " | ".join(f"{n}: stored MiB (saved)" for n in names)
          + " |")
    print("|---|---|" + "---|" * len(names))
    speeds: dict[str, list[float]] = {n: [] for n in names}
    for case, datasets in cases.items():
        cells = []
        logical = 0
        for name, chunker in chunkers().items():
            _done.clear()
            logical, kept, speed = stored(datasets, chunker)
            speeds[name].append(speed)
            cells.append(f"{kept / MIB:.1f} ({1 - kept / logical:.0%})")
        print(f"| {case} | {logical / MIB:.1f} | " + " | ".join(cells) + " |")
    print()
    for name, values in speeds.items():
        print(f"{name}: {sum(values) / len(values):.0f} MB/s of input (chunk + SHA-256)")


if __name__ == "__main__":
    main()
