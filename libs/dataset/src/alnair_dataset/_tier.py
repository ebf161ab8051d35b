"""The interface of a cache tier, so that Redis today and Alluxio next are interchangeable.

A tier stores immutable chunks by content id, each once, and per data set a manifest and
the set of chunk ids it references. Every operation is idempotent: a hydrator that dies
anywhere and repeats the file it was doing neither loses nor double-counts a reference,
because a reference is membership of the data set's id in the chunk's referrer set (a set
add, not a counter increment), and the data set records the chunk id in its own journal
*before* it references it, so a removal finds every reference the data set ever took.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ._manifest import FileEntry


@dataclass(frozen=True)
class TierUsage:
    stored_bytes: int
    chunks: int
    budget_bytes: int

    @property
    def free_bytes(self) -> int:
        return max(0, self.budget_bytes - self.stored_bytes)


@dataclass(frozen=True)
class DatasetFootprint:
    """What a data set occupies: logical bytes, its distinct chunks, its share of them."""

    files: int
    cached_bytes: int
    chunks: int
    unique_bytes: int
    attributed_bytes: int  # each chunk's size divided among the data sets referencing it

    @property
    def dedup_saved_bytes(self) -> int:
        return max(0, self.cached_bytes - self.attributed_bytes)


class CacheTier(Protocol):
    """What the hydrator and the data client need of a tier (see the module docstring). The
    tiers subclass it for its one default method, :meth:`put_file`."""

    name: str
    # At most this many bytes of chunks in one get_chunks call, the calls one after the
    # other (0: no limit, the tier spreads a large request over its servers itself).
    request_bytes: int = 0

    def usage(self) -> TierUsage: ...

    def ref_existing(self, dataset: str, chunk: str) -> bool:
        """Journal ``chunk`` for ``dataset`` and reference it if stored; False if absent."""

    def put_chunk(self, dataset: str, chunk: str, data: bytes, *, journaled: bool = False) -> bool:
        """Store ``data`` as ``chunk`` unless present, referenced by ``dataset``; True if new.
        ``journaled``: :meth:`ref_existing` just journaled it (saves a round trip)."""

    def put_file(self, dataset: str, entry: FileEntry, pieces: Sequence[bytes]) -> list[bool]:
        """Store each of ``pieces`` (the bytes of ``entry.chunks``, in order) as :meth:`put_chunk`
        does, then list ``entry`` as :meth:`record_file` does; which pieces were new. For a
        file read whole already (a small one): a tier that can do it all in one round trip
        overrides this, the steps one by one."""
        new = [self.put_chunk(dataset, chunk, piece)
               for chunk, piece in zip(entry.chunks, pieces, strict=True)]
        self.record_file(dataset, entry)
        return new

    def get_chunks(self, chunks: list[str]) -> list[bytes | None]: ...

    def record_file(self, dataset: str, entry: FileEntry) -> None: ...

    def file_entry(self, dataset: str, path: str) -> FileEntry | None: ...

    def file_entries(self, dataset: str, paths: Sequence[str]) -> list[FileEntry | None]:
        """:meth:`file_entry` of each of ``paths``, in order: a reader looks up a batch's
        entries together. A tier that can do it in one request overrides this."""
        return [self.file_entry(dataset, path) for path in paths]

    def manifest(self, dataset: str) -> dict[str, FileEntry]: ...

    def footprint(self, dataset: str) -> DatasetFootprint: ...

    def release(self, dataset: str, keep: set[str] | None = None) -> int:
        """Drop ``dataset``'s references (all, or those not in ``keep``); bytes freed."""

    def forget_files(self, dataset: str, paths: list[str]) -> None:
        """Unlist files (their chunks stay referenced until :meth:`release`)."""

    def set_meta(self, dataset: str, meta: dict[str, str]) -> None:
        """Record what a reader needs to find the source: ``source``, ``include``,
        ``exclude`` (JSON lists) and ``phase`` ("hydrating" or "ready")."""

    def meta(self, dataset: str) -> dict[str, str]: ...

    def lease(self, dataset: str, reader: str, ttl: float) -> None:
        """A reader says it is reading ``dataset`` for the next ``ttl`` seconds (renewed while
        it reads); a data set with a live lease is never evicted."""

    def unlease(self, dataset: str, reader: str) -> None: ...

    def readers(self, dataset: str) -> int:
        """Live leases on ``dataset``."""

    def drop_manifest(self, dataset: str) -> None:
        """Forget the manifest and the description (after :meth:`release`)."""

    def close(self) -> None: ...
