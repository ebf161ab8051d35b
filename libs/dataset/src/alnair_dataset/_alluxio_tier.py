"""The Alluxio 2.9 cache tier: the open-source Alluxio (the v0.5 seed's system) behind the
same interface as the Redis tier, spoken to through its proxy's REST API (see
:mod:`._alluxio_rest` for why that API).

Layout under the root ``R`` (``/<url path>/<prefix>``); ``q(x)`` is ``x`` percent-quoted
into one path component, which never starts with ``+``, so ``+``-names are the tier's own:

* ``R/chunks/<id>`` a chunk's bytes. Written as ``R/chunks/+tmp+<client>+<n>`` and renamed
  into place; the master's rename fails if the target exists, so exactly one writer of a
  chunk sees it as new, a chunk is never visible half-written, and a writer killed
  mid-chunk leaves only a ``+tmp+`` file (swept by :meth:`AlluxioTier.release` after an hour).
  Usage is the sum of the chunk files' lengths, listed: exact by construction, no counter
  to keep in step. The directory is pinned (its new files inherit the pin), because a full
  2.9 worker evicts unpinned blocks, even of MUST_CACHE files, and a manifest would then
  list chunks whose bytes are gone: with the pin, a full worker refuses the write instead
  (the tier's budget should stay below the workers' memory, as Redis runs with noeviction).
* ``R/refs/<id>/q(dataset)`` one empty directory per referencing data set (making it twice
  is making it once, in one call: a directory is the cheapest marker the REST API makes).
* ``R/datasets/q(dataset)/``: ``journal/<id>`` markers (made *before* the reference, as in
  every tier), ``files/q(path)`` one manifest entry each, ``meta.json``, ``last_read``,
  ``readers/q(reader)+<generation>`` leases. Files with content are written to a ``+tmp+``
  name in their directory and renamed over the old one (which the master will not do onto
  an existing file, so the old one is deleted first): a reader sees the old content, the
  new, or for that one call none (a miss), never a partial file.

Concurrency contract. Alluxio has no multi-key transaction, so the tier orders its steps
so that each interleaving stays correct, instead of relying on one writer:

* A writer takes the reference *before* it checks that the chunk exists (and stores it if
  not); a releaser that finds a chunk without referrers first renames it to a
  ``+doomed+`` name, checks the referrers again, and only then deletes it, renaming it
  back if a reference appeared. So a reference that a writer took and kept always has its
  chunk, and two releasers free a chunk once (one rename wins).
* ``meta.json`` is read-modify-written: it has one writer, the hydrator (leader-elected).
  Readers write only their own lease file and ``last_read`` (last writer wins), never
  ``meta.json``, so a renewal cannot undo a phase change.
* A manifest entry is written by the hydrator and by readers writing back a miss: both
  write the same bytes for the same file version, so the last rename wins harmlessly.
* Leases compare the master's clock with itself: a lease's expiry is its file's
  modification time (set by the master) plus its TTL; "now" is the modification time of
  a probe file this client rewrites. A renewal writes a new generation before it deletes
  the old, so a read data set never looks unread to the evicting hydrator.

What can go stale, never wrong: a reference taken for a chunk that is then not stored (the
budget refused it) stays until the data set is released; a reader whose chunk was freed
under it gets a miss and reads the source.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, unquote, urlparse

from ._alluxio_rest import WRITE_TYPES, AlluxioRest, Exists, Incomplete, NotFound
from ._errors import InvalidSpecError
from ._manifest import FileEntry
from ._tier import CacheTier, DatasetFootprint, TierUsage

TMP = "+tmp+"
DOOMED = "+doomed+"
STALE_TMP_SECONDS = 3600.0
PARALLEL_CALLS = 8
# A read that finds a file still open waits this long for its writer, then reads it as absent.
INCOMPLETE_WAITS = (0.02, 0.05, 0.1, 0.2, 0.4)


def _q(name: str) -> str:
    """``name`` as one path component: percent-quoted, and a leading dot too, so that no
    name is ``.`` or ``..`` (which the master would resolve to another directory)."""
    quoted = quote(name, safe="")
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def _own(entry: dict) -> bool:
    """An entry the tier made for itself (temporary, doomed), not a chunk, ref or file."""
    return entry["name"].startswith("+")


class AlluxioTier(CacheTier):
    """A :class:`~alnair_dataset.CacheTier` on Alluxio 2.9; safe to share between threads."""

    name = "alluxio"

    def __init__(self, rest: AlluxioRest, *, root: str, budget_bytes: int) -> None:
        self.rest = rest
        self.root = "/" + root.strip("/")
        self.budget_bytes = budget_bytes
        self._client = secrets.token_hex(6)  # names this client's temporary and probe files
        self._counter = itertools.count()
        self._pool = ThreadPoolExecutor(PARALLEL_CALLS, thread_name_prefix="alnair-alluxio")
        self._pinned = False

    @classmethod
    def from_url(cls, url: str, *, budget_bytes: int, prefix: str = "alnair",
                 timeout: float = 2.0) -> AlluxioTier:
        """``alluxio://proxy-host:port[/root][?write_type=MUST_CACHE]``."""
        parsed = urlparse(url)
        try:
            port = parsed.port or 39999
        except ValueError as e:
            raise InvalidSpecError(f"tier URL {url!r}: the port is not a number") from e
        if parsed.scheme != "alluxio" or not parsed.hostname:
            raise InvalidSpecError(f"tier URL {url!r}: write alluxio://proxy-host:port[/root]")
        options = dict(part.partition("=")[::2] for part in parsed.query.split("&") if part)
        write_type = options.pop("write_type", "MUST_CACHE").upper()
        if options or write_type not in WRITE_TYPES:
            raise InvalidSpecError(f"tier URL {url!r}: the only option is write_type, one of "
                                   f"{', '.join(WRITE_TYPES)}")
        rest = AlluxioRest(parsed.hostname, port, timeout=timeout, write_type=write_type)
        return cls(rest, root=f"{unquote(parsed.path).rstrip('/')}/{prefix}",
                   budget_bytes=budget_bytes)

    # -- paths ------------------------------------------------------------------------------

    def _chunk(self, chunk: str) -> str:
        return f"{self.root}/chunks/{chunk}"

    def _refs(self, chunk: str) -> str:
        return f"{self.root}/refs/{chunk}"

    def _ds(self, dataset: str, what: str = "") -> str:
        return f"{self.root}/datasets/{_q(dataset)}" + (f"/{what}" if what else "")

    def _tmp_beside(self, path: str, kind: str = TMP) -> str:
        return f"{path.rsplit('/', 1)[0]}/{kind}{self._client}+{next(self._counter)}"

    # -- primitives -------------------------------------------------------------------------

    def _mark(self, path: str) -> None:
        """Add ``path`` to the set its directory is (an empty directory: idempotent)."""
        self.rest.mkdirs(path)

    def _put(self, path: str, data: bytes) -> None:
        """Replace ``path``'s content: written aside, renamed into place."""
        tmp = self._tmp_beside(path)
        self.rest.write_new(tmp, data)
        try:
            self.rest.rename(tmp, path)
        except Exists:
            self.rest.delete(path)
            try:
                self.rest.rename(tmp, path)
            except Exists:  # another writer's rename won the gap: its bytes stand
                self.rest.delete(tmp)

    def _read(self, path: str) -> bytes | None:
        """``path``'s bytes; None if absent, or still open after :data:`INCOMPLETE_WAITS`.

        Every write goes aside and is renamed into place once closed, yet CI once saw a
        manifest entry read as incomplete while a write-back rewrote it (cause unknown):
        absent is the answer that is never wrong (a miss: read from the source and written
        again, which replaces the entry)."""
        for wait in INCOMPLETE_WAITS:
            try:
                return self.rest.read(path)
            except NotFound:
                return None
            except Incomplete:
                time.sleep(wait)
        try:
            return self.rest.read(path)
        except (NotFound, Incomplete):
            return None

    def _now(self) -> float:
        """The master's clock: the modification time of a probe file just rewritten."""
        probe = f"{self.root}/clock/{self._client}"
        self.rest.write_new(probe, b"", overwrite=True)
        return self.rest.status(probe)["lastModificationTimeMs"] / 1000

    # -- chunks -----------------------------------------------------------------------------

    def _chunk_sizes(self) -> dict[str, int]:
        return {e["name"]: int(e["length"]) for e in self.rest.list(f"{self.root}/chunks")
                if not _own(e)}

    def usage(self) -> TierUsage:
        sizes = self._chunk_sizes()
        return TierUsage(sum(sizes.values()), len(sizes), self.budget_bytes)

    def ref_existing(self, dataset: str, chunk: str) -> bool:
        self._mark(self._ds(dataset, f"journal/{chunk}"))
        self._mark(f"{self._refs(chunk)}/{_q(dataset)}")  # before the check: see the docstring
        return self.rest.exists(self._chunk(chunk))

    def put_chunk(self, dataset: str, chunk: str, data: bytes, *, journaled: bool = False) -> bool:
        if not journaled:  # else ref_existing just journaled, referenced and found it absent
            if self.ref_existing(dataset, chunk):
                return False
        if not self._pinned:  # before this client's first chunk (see the module docstring)
            self.rest.mkdirs(f"{self.root}/chunks")
            self.rest.call(f"{self.root}/chunks", "set-attribute", {"pinned": True})
            self._pinned = True
        tmp = self._tmp_beside(self._chunk(chunk))
        self.rest.write_new(tmp, data)
        try:
            self.rest.rename(tmp, self._chunk(chunk))
        except Exists:  # stored by another writer meanwhile
            self.rest.delete(tmp)
            return False
        return True

    def get_chunks(self, chunks: list[str]) -> list[bytes | None]:
        if len(chunks) == 1:
            return [self._read(self._chunk(chunks[0]))]
        return list(self._pool.map(lambda c: self._read(self._chunk(c)), chunks))

    # -- manifests --------------------------------------------------------------------------

    def record_file(self, dataset: str, entry: FileEntry) -> None:
        self._put(self._ds(dataset, f"files/{_q(entry.path)}"), entry.to_json().encode())

    def file_entry(self, dataset: str, path: str) -> FileEntry | None:
        raw = self._read(self._ds(dataset, f"files/{_q(path)}"))
        return None if raw is None else FileEntry.from_json(path, raw)

    def file_entries(self, dataset: str, paths: Sequence[str]) -> list[FileEntry | None]:
        """One REST read each, several at once."""
        return list(self._pool.map(lambda p: self.file_entry(dataset, p), paths))

    def manifest(self, dataset: str) -> dict[str, FileEntry]:
        names = [e["name"] for e in self.rest.list(self._ds(dataset, "files")) if not _own(e)]
        raws = self._pool.map(lambda n: self._read(self._ds(dataset, f"files/{n}")), names)
        return {unquote(n): FileEntry.from_json(unquote(n), raw)
                for n, raw in zip(names, raws, strict=True) if raw is not None}

    def _journaled(self, dataset: str) -> list[str]:
        return [e["name"] for e in self.rest.list(self._ds(dataset, "journal")) if not _own(e)]

    def _holders(self, chunk: str) -> int:
        return sum(not _own(e) for e in self.rest.list(self._refs(chunk)))

    def footprint(self, dataset: str) -> DatasetFootprint:
        files = self.manifest(dataset)
        all_sizes = self._chunk_sizes()
        present = [c for c in self._journaled(dataset) if c in all_sizes]
        sizes = [all_sizes[c] for c in present]
        holders = list(self._pool.map(self._holders, present))
        attributed = sum(s / max(1, h) for s, h in zip(sizes, holders, strict=True))
        return DatasetFootprint(len(files), sum(e.size for e in files.values()), len(present),
                                sum(sizes), round(attributed))

    def release(self, dataset: str, keep: set[str] | None = None) -> int:
        def drop(chunk: str) -> int:
            self.rest.delete(f"{self._refs(chunk)}/{_q(dataset)}")
            freed = self._free_if_unreferenced(chunk)
            self.rest.delete(self._ds(dataset, f"journal/{chunk}"))  # after the reference
            return freed

        chunks = [c for c in self._journaled(dataset) if keep is None or c not in keep]
        freed = sum(self._pool.map(drop, chunks))  # chunks are independent: several at once
        self._sweep()
        return freed

    def _free_if_unreferenced(self, chunk: str) -> int:
        """Delete ``chunk`` if no data set references it; the bytes freed."""
        if self._holders(chunk):
            return 0
        doomed = self._tmp_beside(self._chunk(chunk), DOOMED)
        try:
            self.rest.rename(self._chunk(chunk), doomed)
        except NotFound:  # never stored, or freed by another releaser
            self.rest.delete(self._refs(chunk))
            return 0
        if self._holders(chunk):  # a writer referenced it between the two looks: keep it
            try:
                self.rest.rename(doomed, self._chunk(chunk))
            except Exists:  # ...and already stored it again
                self.rest.delete(doomed)
            return 0
        size = int(self.rest.status(doomed)["length"])
        self.rest.delete(doomed)
        self.rest.delete(self._refs(chunk))  # fails harmlessly if a reference just arrived
        return size

    def _sweep(self) -> None:
        """Delete temporary chunk files older than an hour (their writer died)."""
        stale = [e for e in self.rest.list(f"{self.root}/chunks") if _own(e)]
        if stale:
            cutoff = (self._now() - STALE_TMP_SECONDS) * 1000
            for e in stale:
                if e["lastModificationTimeMs"] < cutoff:
                    self.rest.delete(e["path"])

    def forget_files(self, dataset: str, paths: list[str]) -> None:
        list(self._pool.map(lambda p: self.rest.delete(self._ds(dataset, f"files/{_q(p)}")),
                            paths))

    def set_meta(self, dataset: str, meta: dict[str, str]) -> None:
        raw = self._read(self._ds(dataset, "meta.json"))
        merged = {**(json.loads(raw) if raw else {}), **meta}
        self._put(self._ds(dataset, "meta.json"), json.dumps(merged).encode())

    def meta(self, dataset: str) -> dict[str, str]:
        raw = self._read(self._ds(dataset, "meta.json"))
        if raw is None:
            return {}
        meta = json.loads(raw)
        last_read = self._read(self._ds(dataset, "last_read"))
        if last_read:
            meta["last_read"] = last_read.decode()
        return meta

    def _leases(self, dataset: str) -> list[dict]:
        return [e for e in self.rest.list(self._ds(dataset, "readers")) if not _own(e)]

    def lease(self, dataset: str, reader: str, ttl: float) -> None:
        # A renewal is a new file (reader+generation), then the old one goes: a lease never
        # vanishes for a moment, as replacing one file in place would let it.
        path = self._ds(dataset, f"readers/{_q(reader)}+{self._client}-{next(self._counter)}")
        self._put(path, f"{ttl}".encode())
        for e in self._leases(dataset):
            if e["name"].split("+")[0] == _q(reader) and e["path"] != path:
                self.rest.delete(e["path"])
        now = self.rest.status(path)["lastModificationTimeMs"] / 1000
        self._put(self._ds(dataset, "last_read"), f"{now:.3f}".encode())

    def unlease(self, dataset: str, reader: str) -> None:
        for e in self._leases(dataset):
            if e["name"].split("+")[0] == _q(reader):
                self.rest.delete(e["path"])

    def readers(self, dataset: str) -> int:
        leases = self._leases(dataset)
        if not leases:
            return 0
        now, live = self._now(), set()
        for e in leases:
            ttl = self._read(e["path"])
            if ttl is not None and e["lastModificationTimeMs"] / 1000 + float(ttl) > now:
                live.add(e["name"].split("+")[0])
            else:
                self.rest.delete(e["path"])
        return len(live)

    def drop_manifest(self, dataset: str) -> None:
        for what in ("meta.json", "last_read"):
            self.rest.delete(self._ds(dataset, what))
        for what in ("readers", "files"):
            self.rest.delete(self._ds(dataset, what), recursive=True)
        self.rest.delete(self._ds(dataset))  # stays while a kept part of the journal does

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.rest.close()
