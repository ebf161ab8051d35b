"""Splitting files into content-addressed chunks.

Decision: fixed-size chunks (1 MiB), addressed by SHA-256. Training data sets are mostly
files that are either identical across data sets and users (the same shards, the same
images under another prefix) or different altogether; fixed-size chunking dedups the first
completely and costs one hash per MiB. Content-defined chunking (a gear-hash rolling
boundary, FastCDC-style, :func:`content_defined_boundaries`) also dedups files that differ
by an insertion, which shifts every later fixed-size boundary. Measured
(services/cache_hydrator/bench/dedup_bench.py, docs/benchmarks.md): both store identical
and overlapping data sets once; CDC saves 45 % on edited shards and 35 % on re-packed ones
where fixed 1 MiB saves nothing, but its pure-Python boundary search runs at 17 MB/s against
2 GB/s for fixed chunks + SHA-256, which would make it the hydrator's bottleneck. So CDC
stays a measured alternative until it has a native implementation. 1 MiB keeps a Redis
value small enough for sub-millisecond reads and spreads a large file over every server of
a Redis Cluster.
"""

from __future__ import annotations

import hashlib
import hmac
import random
from collections.abc import Callable, Iterator

CHUNK_BYTES = 1 << 20


def chunk_id(data: bytes) -> str:
    """The address of a chunk: the SHA-256 of its bytes, in hex."""
    return hashlib.sha256(data).hexdigest()


def keyed_chunk_ids(key: bytes) -> Callable[[bytes], str]:
    """Chunk addresses under a secret ``key``: the HMAC-SHA256 of the bytes, in hex (the same
    form as :func:`chunk_id`). Whoever lacks the key cannot compute the address of content
    they guess, so cannot ask the tier whether someone cached it; chunks are shared only
    between data sets stored under the same key."""
    def keyed(data: bytes) -> str:
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    return keyed


def fixed_chunks(data: bytes, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """``data`` cut every ``size`` bytes (the last piece may be shorter; none if empty)."""
    for start in range(0, len(data), size):
        yield data[start:start + size]


_RNG = random.Random(0x41_6E_61_69_72)  # fixed: boundaries must be the same everywhere
_GEAR = tuple(_RNG.getrandbits(64) for _ in range(256))
_MASK64 = (1 << 64) - 1


def content_defined_boundaries(data: bytes, *, average: int = CHUNK_BYTES,
                               minimum: int | None = None,
                               maximum: int | None = None) -> list[int]:
    """End offsets of content-defined chunks of ``data`` (a gear rolling hash).

    A boundary falls where the hash of the last bytes has its top bits zero, so the same
    content yields the same boundaries wherever it sits in a file.
    """
    minimum = minimum or average // 4
    maximum = maximum or average * 4
    bits = max(1, average.bit_length() - 1)
    mask = ((1 << bits) - 1) << (64 - bits)
    ends: list[int] = []
    start, n = 0, len(data)
    while start < n:
        h = 0
        end = min(start + maximum, n)
        i = start + minimum
        if i >= end:
            ends.append(end)
            break
        for i in range(start + minimum, end):  # noqa: B007 — i is read after the loop
            h = ((h << 1) + _GEAR[data[i]]) & _MASK64
            if not h & mask:
                break
        cut = i + 1
        ends.append(cut)
        start = cut
    return ends


def content_defined_chunks(data: bytes, *, average: int = CHUNK_BYTES) -> Iterator[bytes]:
    start = 0
    for end in content_defined_boundaries(data, average=average):
        yield data[start:end]
        start = end
