"""Putting one file of a source into a tier, idempotently.

Both the hydrator and the data client (writing back a miss) store files this way. For each
chunk: if the tier has it, only a reference is added; otherwise the bytes are stored,
within the tier's budget. A small chunk (up to :data:`SEND_WITHOUT_ASKING`) is sent without
asking first whether the tier has it, since the tier stores a chunk only if absent anyway;
a whole file that small goes to the tier in one call with its manifest entry
(:meth:`~alnair_dataset.CacheTier.put_file`: one round trip on one Redis server instead of
three). The manifest entry is written last, after the source confirmed that the bytes read
are of the version listed, so a file is either wholly cached and listed or not listed at
all. Repeating a file (after a crash) changes nothing twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ._chunking import CHUNK_BYTES, chunk_id
from ._errors import CapacityError
from ._manifest import FileEntry
from ._sources import Source, SourceFile
from ._tier import CacheTier

GIB = 1 << 30
SEND_WITHOUT_ASKING = 64 << 10


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB // 10 else f"{n / (1 << 20):.1f} MiB"


class Budget:
    """The tier's free bytes as this process sees them: read from the tier, then kept up to
    date with what this process stores (other writers are seen at the next refresh)."""

    def __init__(self, tier: CacheTier, refresh_every: int = 256) -> None:
        self.tier = tier
        self._lock = threading.Lock()
        self._refresh_every = refresh_every
        self._since = refresh_every
        self._stored = 0
        self._budget = 0

    def reserve(self, size: int, *, needed: int = 0) -> None:
        """Account for ``size`` new bytes, or raise CapacityError saying what is missing."""
        if not self.try_reserve(size):
            free = max(0, self._budget - self._stored)
            raise CapacityError(
                f"needs {gib(max(needed, size))} more, {gib(free)} free in tier "
                f"{self.tier.name} (budget {gib(self._budget)}, {gib(self._stored)} "
                "stored); remove or unpin data sets, or raise the budget")

    def try_reserve(self, size: int) -> bool:
        """Account for ``size`` new bytes if they fit; False if not (and the next call reads
        the tier's usage again: room may have been made meanwhile)."""
        with self._lock:
            if self._since >= self._refresh_every:
                usage = self.tier.usage()
                self._stored, self._budget, self._since = usage.stored_bytes, usage.budget_bytes, 0
            self._since += 1
            if self._stored + size > self._budget:
                self._since = self._refresh_every
                return False
            self._stored += size
            return True

    def give_back(self, size: int) -> None:
        """Un-account bytes reserved for a chunk that turned out to be stored already."""
        with self._lock:
            self._stored -= size


@dataclass(frozen=True)
class StoreResult:
    entry: FileEntry
    new_bytes: int


def store_file(tier: CacheTier, dataset: str, source: Source, file: SourceFile, budget: Budget,
               *, chunk_bytes: int = CHUNK_BYTES, data: bytes | None = None,
               address: Callable[[bytes], str] = chunk_id) -> StoreResult:
    """Store ``file`` in ``tier`` for ``dataset`` and list it in the manifest.

    ``data``: the whole file, already read from ``source`` at the listed version (a reader's
    miss), so it is not read a second time. ``address``: a chunk's id from its bytes (the
    SHA-256, or keyed: :func:`keyed_chunk_ids`)."""
    if data is not None and len(data) != file.size:
        raise ValueError(f"{file.path}: {len(data)} bytes given, {file.size} listed")
    small = 0 < file.size <= SEND_WITHOUT_ASKING
    if small:
        if data is None:
            data = source.read(file, 0, file.size)
        if budget.try_reserve(file.size):
            return _store_whole(tier, dataset, file, budget, chunk_bytes, data, address)
        # No room: as below, a chunk stored already is referenced, the rest refused.
    chunks: list[str] = []
    new_bytes = 0
    for start in range(0, file.size, chunk_bytes):
        end = min(file.size, start + chunk_bytes)
        piece = data[start:end] if data is not None else source.read(file, start, end)
        cid = address(piece)
        if not small and len(piece) <= SEND_WITHOUT_ASKING and budget.try_reserve(len(piece)):
            if tier.put_chunk(dataset, cid, piece):
                new_bytes += len(piece)
            else:
                budget.give_back(len(piece))
        elif not tier.ref_existing(dataset, cid):
            budget.reserve(len(piece), needed=file.size - start)
            if tier.put_chunk(dataset, cid, piece, journaled=True):
                new_bytes += len(piece)
        chunks.append(cid)
    if file.size == 0 and data is None:
        source.read(file, 0, 0)  # still confirms the file is as listed
    entry = FileEntry(file.path, file.size, file.version, tuple(chunks), chunk_bytes)
    tier.record_file(dataset, entry)
    return StoreResult(entry, new_bytes)


def _store_whole(tier: CacheTier, dataset: str, file: SourceFile, budget: Budget, chunk_bytes: int,
                 data: bytes, address: Callable[[bytes], str]) -> StoreResult:
    """A small file, read whole and its size reserved: its chunks and its entry in one tier
    call (one round trip on Redis instead of three); the bytes of pieces found stored already
    are given back."""
    pieces = [data[start:start + chunk_bytes] for start in range(0, file.size, chunk_bytes)]
    entry = FileEntry(file.path, file.size, file.version, tuple(map(address, pieces)), chunk_bytes)
    new = tier.put_file(dataset, entry, pieces)
    new_bytes = sum(len(piece) for piece, stored in zip(pieces, new, strict=True) if stored)
    budget.give_back(file.size - new_bytes)
    return StoreResult(entry, new_bytes)
