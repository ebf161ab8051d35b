"""Hydrating one data set: list the source, store what the tier lacks, report as it goes.

Resuming is the normal path, not a special one: files already in the manifest at the
listed version are not read again, and a file the previous run was half-way through is
stored again from its start (storing is idempotent, see alnair_dataset's store_file). The
tier's blocking calls run on worker threads; the event loop only schedules and reports.

Outcomes: READY with sizes and dedup savings; FAILED with the reason code of the error
(source unreachable, bucket missing, access denied, path not allowed, source changed,
insufficient capacity); or stopped (the data set is being removed). A tier that is down is
waited for, with the wait visible in the status, since losing Redis loses only cache.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from alnair_common import get_logger
from alnair_dataset import (
    Budget,
    CacheTier,
    CapacityError,
    DatasetError,
    FileEntry,
    Source,
    SourceFile,
    TierUnavailableError,
    chunk_id,
    gib,
    store_file,
)

from ._domain import DatasetStatus, Phase
from ._metrics import FILES, SOURCE_READ, STORED, TIER_BUDGET, TIER_STORED

log = get_logger("alnair.cache-hydrator")
Publish = Callable[[DatasetStatus], Awaitable[None]]
MakeRoom = Callable[[str, int], Awaitable[tuple[list[str], list[str]]]]
"""``(data set, bytes needed) -> (evicted, kept)``: frees room by evicting other data sets;
``kept`` says why the others stay ("b (pinned)", "c (being read)")."""


async def no_room(_key: str, _needed: int) -> tuple[list[str], list[str]]:
    return [], []
SOURCE_RETRIES = 3


class Hydration:
    """One run over one data set; :meth:`stop` ends it between two files."""

    def __init__(self, status: DatasetStatus, tier: Callable[[], CacheTier],
                 source: Callable[[], Source], publish: Publish, *,
                 status_interval: float = 0.5, tier_retry: float = 2.0,
                 bytes_per_second: int = 0, make_room: MakeRoom = no_room,
                 threads: int = 4, address: Callable[[bytes], str] = chunk_id) -> None:
        self.status = status
        self._address = address  # a chunk's id from its bytes (store_file)
        self._tier = tier
        self._source = source
        self._publish = publish
        self._interval = status_interval
        self._tier_retry = tier_retry
        self._stopped = asyncio.Event()
        self._rate = bytes_per_second
        self._budget_bytes = 0
        self._make_room = make_room
        self._threads = threads

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> DatasetStatus:
        try:
            return await self._run()
        except _Stopped:
            return self.status
        except DatasetError as e:
            return await self._fail(e.reason, str(e))

    async def _run(self) -> DatasetStatus:
        source = self._source()
        try:
            return await self._hydrate(source)
        finally:
            source.close()

    async def _hydrate(self, source: Source) -> DatasetStatus:
        key = self.status.spec.key
        listing: list[SourceFile] = await self._retrying(source.list, "listing the source")
        total = sum(f.size for f in listing)
        tier = await self._retrying(self._tier, "connecting to the tier")
        usage = await self._retrying(tier.usage, "reading the tier's usage")
        self._budget_bytes = usage.budget_bytes
        if total > usage.budget_bytes:
            raise CapacityError(
                f"needs {gib(total)}, more than the whole budget of tier {tier.name} "
                f"({gib(usage.budget_bytes)}, {gib(usage.free_bytes)} free); select fewer "
                "files or raise the budget (ALNAIR_CACHE_BUDGET_BYTES)")
        await self._retrying(lambda: tier.set_meta(key, self._meta("hydrating")),
                             "describing the data set")
        done = await self._retrying(lambda: tier.manifest(key), "reading the manifest")
        todo = [f for f in listing if _needs_store(done.get(f.path), f)]
        cached = total - sum(f.size for f in todo)
        kept = await self._room_for(tier, total - cached)
        await self._report(phase=Phase.HYDRATING, total_bytes=total, files_total=len(listing),
                           cached_bytes=cached, files_cached=len(listing) - len(todo),
                           reason="", message=f"hydrating {len(todo)} of {len(listing)} files "
                                              f"({gib(total - cached)} to read)")
        budget = Budget(tier)
        began = time.monotonic()
        progress = {"cached": cached, "read": 0, "last": began}
        pending = iter(todo)

        async def worker() -> None:
            """Files are independent: ``threads`` workers take the next one in turn."""
            for file in pending:
                if self._stopped.is_set():
                    return
                try:
                    stored = await self._retrying(
                        lambda file=file: store_file(tier, key, source, file, budget,
                                                     address=self._address),
                        f"storing {file.path}")
                except CapacityError as e:
                    raise CapacityError(
                        f"{e}; {self.status.files_cached} of {len(listing)} files were cached "
                        "before the budget ran out"
                        + (f"; kept: {', '.join(kept)}" if kept else "")) from e
                progress["cached"] += file.size
                progress["read"] += file.size
                SOURCE_READ.inc(file.size)
                STORED.inc(stored.new_bytes)  # type: ignore[attr-defined]
                FILES.inc()
                self.status = self.status.evolve(cached_bytes=progress["cached"],
                                                 files_cached=self.status.files_cached + 1)
                if self._rate:
                    await self._pause(began + progress["read"] / self._rate - time.monotonic())
                if time.monotonic() - progress["last"] >= self._interval:
                    progress["last"] = time.monotonic()
                    await self._publish(self.status)

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self._threads):
                    group.create_task(worker())
        except* DatasetError as failures:
            raise failures.exceptions[0] from None
        if self._stopped.is_set():
            return self.status
        listed = {f.path for f in listing}
        stale = [p for p in done if p not in listed]
        await self._retrying(lambda: self._collect(tier, key, stale), "releasing stale chunks")
        fp = await self._retrying(lambda: tier.footprint(key), "measuring the data set")
        usage = await self._retrying(tier.usage, "reading the tier's usage")
        TIER_STORED.set(usage.stored_bytes)
        await self._retrying(lambda: tier.set_meta(key, self._meta("ready")),
                             "describing the data set")
        return await self._report(
            phase=Phase.READY, reason="", cached_bytes=fp.cached_bytes, files_cached=fp.files,
            chunks=fp.chunks, unique_bytes=fp.unique_bytes,
            dedup_saved_bytes=fp.dedup_saved_bytes,
            message=f"{fp.files} file{'' if fp.files == 1 else 's'}, {gib(fp.cached_bytes)} cached; "
                    f"{gib(fp.dedup_saved_bytes)} shared with other data sets or repeated")

    async def _room_for(self, tier: CacheTier, needed: int) -> list[str]:
        """Evict other data sets if ``needed`` bytes (an upper bound: dedup may need less) do
        not fit; return why the rest were kept, for the message if it still does not fit."""
        usage = await self._retrying(tier.usage, "reading the tier's usage")
        TIER_STORED.set(usage.stored_bytes)
        TIER_BUDGET.set(usage.budget_bytes)
        if needed <= usage.free_bytes:
            return []
        evicted, kept = await self._make_room(self.status.spec.key, needed - usage.free_bytes)
        if evicted:
            await self._report(message=f"evicted {', '.join(evicted)} to make room")
        return kept

    def _meta(self, phase: str) -> dict[str, str]:
        spec = self.status.spec
        return {"source": spec.source, "include": json.dumps(spec.include),
                "exclude": json.dumps(spec.exclude), "phase": phase,
                "budget_bytes": str(self._budget_bytes)}

    @staticmethod
    def _collect(tier: CacheTier, key: str, stale: list[str]) -> None:
        """Unlist files gone from the source and drop chunks no listed file uses any more."""
        tier.forget_files(key, stale)
        keep = {c for entry in tier.manifest(key).values() for c in entry.chunks}
        tier.release(key, keep=keep)

    async def _retrying(self, call: Callable[[], object], what: str) -> object:
        """Run a blocking call on a thread. A tier that is down is waited for (until stopped);
        a source that is unreachable gets SOURCE_RETRIES tries; other errors end the run."""
        source_tries = 0
        while True:
            try:
                return await asyncio.to_thread(call)
            except TierUnavailableError as e:
                await self._report(message=f"{what}: cache tier unavailable, retrying in "
                                           f"{self._tier_retry:.0f} s: {e}", reason=e.reason)
                log.warning("tier unavailable", dataset=self.status.spec.key, error=str(e))
            except DatasetError as e:
                source_tries += 1
                if not e.temporary or source_tries >= SOURCE_RETRIES:
                    raise
                log.info("source error, retrying", dataset=self.status.spec.key, error=str(e))
            await self._pause(self._tier_retry)
            if self._stopped.is_set():
                raise _Stopped

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` or until stopped, whichever comes first."""
        if seconds <= 0:
            return
        waiter = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({waiter}, timeout=seconds)
        finally:
            waiter.cancel()

    async def _fail(self, reason: str, message: str) -> DatasetStatus:
        log.warning("hydration failed", dataset=self.status.spec.key, reason=reason,
                    error=message)
        return await self._report(phase=Phase.FAILED, reason=reason, message=message)

    async def _report(self, **changes: object) -> DatasetStatus:
        self.status = self.status.evolve(**changes)
        await self._publish(self.status)
        return self.status


class _Stopped(DatasetError):
    """The run was stopped while it waited (the data set is being removed)."""

    reason = "stopped"


def _needs_store(entry: FileEntry | None, file: SourceFile) -> bool:
    return entry is None or (entry.version, entry.size) != (file.version, file.size)
