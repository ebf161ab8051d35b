"""Reading a data set by name: from the tier when it has the file, else from the source.

The same code reads a data set that is cached, half-cached or not cached at all, and one
whose tier went away while it read: a file is read from the tier only if its manifest entry
exists and every chunk is there, otherwise from the source (and, if asked, written back so
the next epoch hits). A tier error opens a breaker for ``breaker_seconds``: reads go
straight to the source instead of waiting on a dead server's time-out for every file.

Write-backs are a cache fill, never worth slowing a single read for: a read's miss is written
on a small executor of their own, and one found with :data:`WRITE_BACK_QUEUE_BYTES` already
waiting to be written is not written back (the next epoch's miss writes it). A batch's misses
(:meth:`DatasetReader.read_many`) are written by the reader thread that read each, before the
batch returns: with several threads reading misses at once the two writers fell behind (on a
16-core host, 8 DataLoader workers, the directory tier held 3,877 of 12,000 samples after the
first epoch, where one read at a time let them write 11,776), so the next epochs missed too.

Snapshot semantics: a hit returns the bytes as they were when hydrated; the hydrator
notices changes on its next run (versions differ) and re-hydrates those files.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ._errors import CapacityError, DatasetError, InvalidSpecError, TierPermissionError, TierUnavailableError
from ._manifest import FileEntry
from ._open import open_tier
from ._sources import Source, SourceFile, open_source
from ._store import Budget, store_file
from ._tier import CacheTier

# The environment a workload gets from `alnair run --dataset` or from the admission webhook.
# One data set: ALNAIR_DATASET (its name) and ALNAIR_DATASET_SOURCE. Several: ALNAIR_DATASETS
# ("imagenet,coco") and per data set ALNAIR_DATASET_<NAME>_SOURCE, <NAME> being the name in
# upper case with '-' as '_' (ALNAIR_DATASET_COCO_2017_SOURCE). Either form may add
# ALNAIR_DATASET_PATH / ALNAIR_DATASET_<NAME>_PATH: where this process sees the source's root
# (a hostPath volume's mountPath), read for misses instead of the path the hydrator read;
# and ALNAIR_DATASET_NAMESPACE: the Kubernetes namespace of the data sets (their id in the
# tier is "<namespace>.<name>", as the hydrator keys them). The tier is one for all.
ENV_DATASET = "ALNAIR_DATASET"
ENV_DATASETS = "ALNAIR_DATASETS"
ENV_TIER_URL = "ALNAIR_CACHE_TIER_URL"
ENV_PREFIX = "ALNAIR_CACHE_PREFIX"
ENV_SOURCE = "ALNAIR_DATASET_SOURCE"
ENV_PATH = "ALNAIR_DATASET_PATH"
ENV_NAMESPACE = "ALNAIR_DATASET_NAMESPACE"

# Write-backs: threads of their own (few: on a busy machine they compete with the reads for the
# CPU and the GIL), the bytes that may wait for them, and how often to re-read whether the data
# set is still in the tier and, once the budget ran out, whether it has room again.
WRITE_BACK_THREADS = 2
WRITE_BACK_QUEUE_BYTES = 256 << 20
RECHECK_SECONDS = 1.0


def dataset_variable(name: str, suffix: str) -> str:
    """The per-data-set variable ``suffix`` (SOURCE, PATH) of data set ``name``."""
    return f"ALNAIR_DATASET_{name.upper().replace('-', '_').replace('.', '_')}_{suffix}"


@dataclass(frozen=True)
class DatasetEnvironment:
    """What the environment says about one data set: ``key`` is its id in the tier."""

    name: str
    key: str
    source: str = ""
    path: str = ""


def dataset_environment(name: str | None = None,
                        environ: Mapping[str, str] | None = None) -> DatasetEnvironment:
    """The data set ``name`` (default: the only one the environment names) as the environment
    describes it; InvalidSpecError when no data set is named or several are and none chosen."""
    env = os.environ if environ is None else environ
    single = env.get(ENV_DATASET, "")
    listed = [n.strip() for n in env.get(ENV_DATASETS, "").split(",") if n.strip()]
    if not name:
        if single:
            name = single
        elif len(listed) == 1:
            name = listed[0]
        elif listed:
            raise InvalidSpecError(f"${ENV_DATASETS} names {len(listed)} data sets "
                                   f"({', '.join(listed)}): pass name= to choose one")
        else:
            raise InvalidSpecError(f"no data set named: pass name= or set ${ENV_DATASET}")
    own = name == single or not listed
    source = env.get(dataset_variable(name, "SOURCE")) or env.get(ENV_SOURCE, "")
    path = env.get(dataset_variable(name, "PATH")) or (env.get(ENV_PATH, "") if own else "")
    namespace = env.get(ENV_NAMESPACE, "")
    return DatasetEnvironment(name, f"{namespace}.{name}" if namespace else name, source, path)


@dataclass
class ReadStats:
    """What a reader did: hits and misses in files, bytes by origin."""

    hits: int = 0
    misses: int = 0
    tier_bytes: int = 0
    source_bytes: int = 0
    written_back: int = 0
    write_backs_dropped: int = 0  # misses not written back: the queue was full
    tier_errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, *, hit: bool, size: int) -> None:
        with self._lock:
            if hit:
                self.hits, self.tier_bytes = self.hits + 1, self.tier_bytes + size
            else:
                self.misses, self.source_bytes = self.misses + 1, self.source_bytes + size


class DatasetReader:
    """Reads the files of one data set; thread-safe; open one per process.

    ``name``, ``tier_url`` and ``source`` default to what the environment says
    (:func:`dataset_environment`: ``$ALNAIR_DATASET``, or the only one of ``$ALNAIR_DATASETS``;
    ``$ALNAIR_CACHE_TIER_URL``; the data set's source variable), as ``alnair run --dataset``
    and the admission webhook set it. ``source`` is needed only when the tier cannot say
    where the data come from. ``threads`` read misses and prefetch; ``tier_streams`` (default
    ``threads``) is how many of a batch's tier requests may be in flight at once: readers
    beside each other share one server, which serves eight readers' small requests one
    at a time each ~3x faster than many at once (a DataLoader's workers: ``CachedSamples``
    gives each ``threads`` / workers).
    """

    def __init__(self, name: str | None = None, *, tier_url: str | None = None,
                 source: str | None = None, prefix: str | None = None,
                 s3_options: dict[str, Any] | None = None, write_back: bool = True,
                 threads: int = 8, breaker_seconds: float = 5.0, timeout: float = 1.0,
                 budget_bytes: int = 0, lease_seconds: float = 30.0,
                 tier_streams: int | None = None) -> None:
        described = dataset_environment(name)
        self.name = described.name
        self.key = described.key  # the id in the tier: "<namespace>.<name>" on Kubernetes
        url = tier_url or os.environ.get(ENV_TIER_URL)
        self.prefix = prefix or os.environ.get(ENV_PREFIX, "alnair")
        self.stats = ReadStats()
        self._breaker_seconds = breaker_seconds
        self._down_until = 0.0
        self._write_back = write_back
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="alnair-read")
        self.tier_streams = max(1, threads if tier_streams is None else tier_streams)
        self._writer = ThreadPoolExecutor(max_workers=WRITE_BACK_THREADS,
                                          thread_name_prefix="alnair-write-back")
        self._writing: set[str] = set()
        self._queued_bytes = 0
        self._write_futures: set[Future[None]] = set()
        self._budget: Budget | None = None
        self._listed_checked = float("-inf")  # when the tier last said whether it has the data set
        self._listed = True
        self._full_until = 0.0  # the budget ran out: no write-back until then
        self._lock = threading.Lock()
        self.tier: CacheTier | None = None
        meta: dict[str, str] = {}
        self._manifest: dict[str, FileEntry] = {}
        if url:
            try:
                self.tier = open_tier(url, budget_bytes=budget_bytes, prefix=self.prefix,
                                      timeout=timeout)
                meta = self.tier.meta(self.key)
                self._manifest = self.tier.manifest(self.key)
            except TierUnavailableError:
                self._trip()
        self._known = bool(meta)
        if self.tier is not None and not budget_bytes:
            self.tier.budget_bytes = int(meta.get("budget_bytes", 0))  # the hydrator's
        uri = meta.get("source") or source or described.source
        if not uri:
            raise InvalidSpecError(
                f"data set {self.name!r}: the tier does not know it and no source was given "
                f"(source= or ${ENV_SOURCE})")
        if described.path and uri.startswith("file:"):
            # The same files as the hydrator read, seen where this container mounts them.
            uri = "file://" + os.path.abspath(described.path)
        self.source: Source = open_source(
            uri, include=json.loads(meta.get("include", "[]")),
            exclude=json.loads(meta.get("exclude", "[]")), s3_options=s3_options)
        self._reader_id = uuid.uuid4().hex
        self._lease_seconds = lease_seconds
        self._closed = threading.Event()
        self._leasing: threading.Thread | None = None
        if self._known:
            self._renew()
            # The thread holds the reader weakly: a reader dropped without close() is
            # collected, its thread ends and its lease runs out, instead of both living on.
            self._leasing = threading.Thread(target=_keep_lease,
                                             args=(weakref.ref(self), self._closed, lease_seconds / 3),
                                             daemon=True, name=f"alnair-lease-{self.name}")
            self._leasing.start()
        self._files: dict[str, SourceFile] = {}
        if meta.get("phase") == "ready" and self._manifest:
            self._files = {p: SourceFile(p, e.size, e.version) for p, e in self._manifest.items()}
        else:
            self._files = {f.path: f for f in self.source.list()}

    # -- listing ----------------------------------------------------------------------------

    def files(self) -> list[str]:
        """Every file of the data set, sorted (the order samples are numbered in)."""
        return sorted(self._files)

    def size(self, path: str) -> int:
        return self.file(path).size

    def has(self, path: str) -> bool:
        return path in self._files

    def file(self, path: str) -> SourceFile:
        """The file's listing: path, size and the source's version (an S3 ETag, or the mtime
        and size of a local file)."""
        try:
            return self._files[path]
        except KeyError:
            raise FileNotFoundError(f"{path!r} is not in data set {self.name!r}") from None

    # -- reading ----------------------------------------------------------------------------

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``start``..``end`` of a file (all of it by default)."""
        file = self.file(path)
        end = file.size if end is None else min(end, file.size)
        if end <= start:
            return b""  # an empty file or range needs neither tier nor source
        data = self._from_tier([file], start, end)[0]
        if data is not None:
            self.stats.count(hit=True, size=len(data))
            return data
        return self._from_source(file, start, end)

    def read_many(self, paths: Sequence[str]) -> list[bytes]:
        """Whole files, in the order given: the chunks of every file the tier has are asked
        for together (on Redis pipelines of 512 KB in turn, where one read per file is one
        round trip each: a DataLoader batch of 256 small samples, 256 round trips; a file
        larger than that on the reader's threads, beside the others), and the rest is read
        from the source, the misses on the reader's threads."""
        files = [self.file(p) for p in paths]
        out = self._from_tier(files)
        for data in out:
            if data:  # an empty file is no hit, as in read()
                self.stats.count(hit=True, size=len(data))
        missing = [i for i, data in enumerate(out) if data is None]
        if len(missing) == 1:
            out[missing[0]] = self._from_source(files[missing[0]], now=True)
        elif missing:
            read = self._pool.map(lambda f: self._from_source(f, now=True), [files[i] for i in missing])
            for i, data in zip(missing, read, strict=True):
                out[i] = data
        return out  # type: ignore[return-value]  # every None was filled above

    def iter_files(self, paths: Iterable[str], *, ahead: int = 16) -> Iterator[tuple[str, bytes]]:
        """``(path, bytes)`` in the order given, reading up to ``ahead`` files in advance on
        the reader's threads (prefetch)."""
        pending: list[tuple[str, Future[bytes]]] = []
        it = iter(paths)
        for path in it:
            pending.append((path, self._pool.submit(self.read, path)))
            if len(pending) >= ahead:
                break
        while pending:
            path, future = pending.pop(0)
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt, self._pool.submit(self.read, nxt)))
            yield path, future.result()

    def _from_source(self, file: SourceFile, start: int = 0, end: int | None = None, *,
                     now: bool = False) -> bytes:
        """The bytes from the source; the whole file written back on the writers' executor, or
        before returning with ``now`` (a batch's misses)."""
        end = file.size if end is None else end
        if end <= start:
            return b""  # an empty file is no miss, as in read()
        data = self.source.read(file, start, end)
        self.stats.count(hit=False, size=len(data))
        self._maybe_write_back(file, data if (start, end) == (0, file.size) else None, now=now)
        return data

    def _from_tier(self, files: list[SourceFile], start: int = 0,
                   end: int | None = None) -> list[bytes | None]:
        """Bytes ``start``..``end`` (None: each file's end) of each file the tier holds whole
        and current; None for the others. Chunks are asked for in requests of at most the
        tier's ``request_bytes``, cut at chunk boundaries (eight DataLoader workers'
        whole-batch pipelines were served 2.7x slower than 512 KB requests: the replies
        pile up in the server), one after the other in each of up to ``tier_streams``
        streams on the reader's threads: the small files share the first, each larger file
        goes whole to one (a batch of eight 16 MiB shards in one stream read at 115 MB/s,
        where eight ``read`` calls on threads got 732)."""
        out: list[bytes | None] = [None] * len(files)
        if self.tier is None or time.monotonic() < self._down_until:
            return out
        wanted: list[tuple[int, FileEntry, range, int]] = []  # file, entry, chunks, its end
        limit = self.tier.request_bytes or sys.maxsize
        try:
            reading: list[tuple[int, int]] = []  # file, its end
            for i, file in enumerate(files):
                stop = file.size if end is None else end
                if stop <= start:
                    out[i] = b""
                else:
                    reading.append((i, stop))
            self._look_up([files[i] for i, _ in reading])
            for i, stop in reading:
                entry = self._manifest.get(files[i].path)
                if entry is None or entry.version != files[i].version:
                    continue  # not in the tier, or an older version of it: the source has it
                wanted.append((i, entry, entry.chunk_span(start, stop), stop))
            small: list[tuple[int, FileEntry, range, int]] = []
            large: list[tuple[int, FileEntry, range, int]] = []
            for w in wanted:
                (large if w[1].span_bytes(w[2]) > limit else small).append(w)
            streams = min(self.tier_streams, len(large) + 1)  # the small files' stream first
            groups = [g for g in [small + large[streams - 1::streams]]
                      + [large[k - 1::streams] for k in range(1, streams)] if g]
            fetched = list(self._pool.map(self._chunks_of, groups) if len(groups) > 1
                           else map(self._chunks_of, groups))
            got = {w[0]: chunks for group, per_file in zip(groups, fetched, strict=True)
                   for w, chunks in zip(group, per_file, strict=True)}
        except TierUnavailableError:
            self._trip()
            return [None] * len(files)
        for i, entry, span, stop in wanted:
            mine = got[i]
            if any(c is None for c in mine):
                continue  # freed or lost since the entry was read: the source has it
            first = span.start * entry.chunk_bytes
            data = b"".join(mine)  # type: ignore[arg-type]
            if len(data) != entry.span_bytes(span):
                continue  # a chunk cut short (disk trouble, another writer): the source has it
            out[i] = data[start - first:stop - first]  # all of it (read_many): no copy
        return out

    def _chunks_of(self, group: list[tuple[int, FileEntry, range, int]]) -> list[list[bytes | None]]:
        """Each file's chunks (``_from_tier``'s wanted items), asked for in requests of at most
        the tier's ``request_bytes``, one after the other, cut at chunk boundaries."""
        assert self.tier is not None
        limit = self.tier.request_bytes or sys.maxsize
        requests: list[list[str]] = [[]]
        held = 0
        for _, entry, span, _ in group:
            for c in span:
                size = entry.span_bytes(range(c, c + 1))
                if requests[-1] and held + size > limit:
                    requests.append([])
                    held = 0
                requests[-1].append(entry.chunks[c])
                held += size
        flat = [data for chunks in requests if chunks for data in self.tier.get_chunks(chunks)]
        per_file, at = [], 0
        for _, _, span, _ in group:
            per_file.append(flat[at:at + len(span)])
            at += len(span)
        return per_file

    def _look_up(self, files: list[SourceFile]) -> None:
        """Ask the tier, in one request, for the manifest entries of ``files`` that this
        reader lacks or holds for another version (files written back since it started, by
        any reader: a DataLoader worker's own manifest misses ~7/8 of what the other seven
        wrote in epoch 1), and keep those that match the source's version."""
        assert self.tier is not None
        lacking = [f for f in files if (e := self._manifest.get(f.path)) is None or e.version != f.version]
        if not lacking:
            return
        found = self.tier.file_entries(self.key, [f.path for f in lacking])
        for file, entry in zip(lacking, found, strict=True):
            if entry is not None and entry.version == file.version:
                self._manifest[file.path] = entry

    def _maybe_write_back(self, file: SourceFile, data: bytes | None, *, now: bool = False) -> None:
        if not (self._write_back and self._known and self.tier is not None and self.tier.budget_bytes):
            return
        if time.monotonic() < max(self._down_until, self._full_until):
            return
        with self._lock:
            if file.path in self._writing:
                return
            if not now and self._writing and self._queued_bytes + file.size > WRITE_BACK_QUEUE_BYTES:
                self.stats.write_backs_dropped += 1
                return
            self._writing.add(file.path)
            self._queued_bytes += file.size
            if not now:
                future = self._writer.submit(self._write, file, data)
                self._write_futures.add(future)
                future.add_done_callback(self._write_futures.discard)  # set.discard: takes no lock
                return
        self._write(file, data)

    def _write(self, file: SourceFile, data: bytes | None) -> None:
        assert self.tier is not None
        try:
            if self._still_listed():  # not removed meanwhile
                result = store_file(self.tier, self.key, self.source, file, self._write_budget(),
                                    data=data)
                self._manifest[file.path] = result.entry
                with self.stats._lock:
                    self.stats.written_back += 1
        except TierPermissionError:
            self._write_back = False  # read-only credentials (Kubernetes pods): the hydrator fills
        except TierUnavailableError:
            self._trip()
        except (CapacityError, OSError):  # no room (or the directory tier's disk failing): try later
            self._full_until = time.monotonic() + RECHECK_SECONDS
        except DatasetError:
            pass  # changed: the next read goes to the source again
        finally:
            with self._lock:
                self._writing.discard(file.path)
                self._queued_bytes -= file.size

    def _still_listed(self) -> bool:
        """Whether the data set is still in the tier (its description is), asked at most once
        per :data:`RECHECK_SECONDS` rather than once per write-back, which was one more round
        trip per file. A data set removed meanwhile gets no entry written after this notices;
        those written before are the same race a per-file check had, only longer."""
        assert self.tier is not None
        now = time.monotonic()
        if now - self._listed_checked >= RECHECK_SECONDS:
            self._listed = bool(self.tier.meta(self.key))
            self._listed_checked = now
        return self._listed

    def _write_budget(self) -> Budget:
        """One budget for all of this reader's write-backs: it reads the tier's usage once
        per 256 stores, not once per file (a directory tier's usage is 256 files to read, a
        Redis tier's a 256-command pipeline; per file it made a cold epoch 3x slower than
        reading S3 directly on the H200)."""
        with self._lock:
            if self._budget is None:
                assert self.tier is not None
                self._budget = Budget(self.tier)
            return self._budget

    _lease_refused = False  # set once a read-only tier user may not write its lease

    def _renew(self) -> None:
        if self.tier is None or self._lease_refused:
            return
        try:
            self.tier.lease(self.key, self._reader_id, self._lease_seconds)
        except TierPermissionError:
            self._lease_refused = True  # a Kubernetes pod's read-only user: nothing to renew
        except TierUnavailableError:
            self._trip()

    def _trip(self) -> None:
        with self.stats._lock:
            self.stats.tier_errors += 1
        self._down_until = time.monotonic() + self._breaker_seconds

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the write-backs queued so far are done (close() abandons them)."""
        with self._lock:
            pending = list(self._write_futures)
        for future in pending:
            future.exception(timeout)

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True, cancel_futures=True)
        if self.tier is not None:
            if self._known:
                try:
                    self.tier.unlease(self.key, self._reader_id)
                except TierUnavailableError:
                    pass  # the lease runs out by itself
            self.tier.close()
        self.source.close()

    def __enter__(self) -> DatasetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _keep_lease(reader: weakref.ref[DatasetReader], closed: threading.Event, every: float) -> None:
    """While the reader is open, its data set is in use: the hydrator will not evict it."""
    while not closed.wait(every):
        alive = reader()
        if alive is None:
            return  # dropped without close(): the lease runs out by itself
        alive._renew()
        del alive
