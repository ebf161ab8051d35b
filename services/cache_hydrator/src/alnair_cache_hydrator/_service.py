"""The cache hydrator: turns dataset requests into hydrated data sets in the cache tier.

State lives where a restart finds it: each data set's latest status (with its spec) in the
``cache_datasets`` bucket, its manifest and references in the tier. On start the service
resumes every data set that was PENDING or HYDRATING, then consumes requests. A request is
acknowledged once the bucket holds its outcome; hydration itself runs in the background
and reports on ``alnair.cache.<dataset>.status``.

Request outcomes: a bad request (invalid name or source, a name already used for other
data, removing a data set that does not exist) is terminated with an error event naming
the request; the data set it named, if any, is untouched. A tier that is down during a
removal is a temporary error (retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from alnair.v1 import cache_pb2, workload_pb2
from alnair_common import (
    BusUnavailableError,
    DurableConsumer,
    Service,
    TypedKV,
    subjects,
)
from alnair_dataset import (
    CacheTier,
    DatasetError,
    InvalidSpecError,
    PathNotAllowedError,
    Source,
    chunk_id,
    gib,
    keyed_chunk_ids,
    open_source,
    open_tier,
)

from ._domain import (
    AddRequest,
    DatasetSpec,
    DatasetStatus,
    Phase,
    RemoveRequest,
    request_from_proto,
)
from ._errors import InvalidRequestError, TierBusyError
from ._hydration import Hydration
from ._metrics import DATASET_BYTES, DATASET_PROGRESS, EVICTIONS, OUTCOMES
from ._settings import CacheHydratorSettings
from ._tier_readers import TierReaders
from ._tier_stats import TierStats
from ._workload_readers import BUCKET as WORKLOADS_BUCKET
from ._workload_readers import WorkloadReaders

BUCKET = subjects.CACHE_DATASETS_BUCKET
ACTIVE = (Phase.PENDING, Phase.HYDRATING)
REFUSED = (PathNotAllowedError.reason, InvalidSpecError.reason)  # by the rules
CATCH_UP_SECONDS = 30.0


class CacheHydratorService(Service):
    name = "cache-hydrator"
    role = "hydrates data sets from S3 or local directories into the cache tier"
    settings_class = CacheHydratorSettings

    def __init__(self, settings: CacheHydratorSettings) -> None:
        super().__init__(settings)
        self.settings: CacheHydratorSettings = settings
        self.kv: TypedKV[cache_pb2.CacheDatasetStatus] | None = None
        self.jobs: dict[str, tuple[Hydration, asyncio.Task[DatasetStatus]]] = {}
        self._tier: CacheTier | None = None
        self.source_rules = settings.source_rules
        self.s3_profiles = settings.s3_profiles
        self._slots = asyncio.Semaphore(settings.cache_concurrent_hydrations)
        self._readers: TierReaders | None = None
        self.workload_readers = WorkloadReaders()
        self._revoking: set[str] = set()  # data sets whose source the rules no longer allow

    async def setup(self) -> None:
        assert self.bus is not None
        self.kv = await TypedKV.open(self.bus, BUCKET, cache_pb2.CacheDatasetStatus)
        for key in await self.kv.keys():
            found = await self.kv.get(key)
            if found is None:
                continue
            status = DatasetStatus.from_proto(found.value)
            if (why := self._disallowed(status)) is not None:
                self._revoking.add(status.spec.key)  # before any request is read
                self.spawn(self._revoke(status, why), f"revoke:{key}")
            elif status.phase in ACTIVE:
                self.log.info("resuming hydration", dataset=key)
                self._start(status)
        # What live workloads read, before anything may be evicted (a pod holds no lease).
        watch = await (await TypedKV.open(self.bus, WORKLOADS_BUCKET,
                                          workload_pb2.WorkloadEvent)).watch()
        self.spawn(self.workload_readers.follow(watch), "workload-readers")
        await watch.caught_up(CATCH_UP_SECONDS)
        self.spawn(TierStats(self.tier, self.settings.tier_url).follow(
            self.settings.cache_stats_interval_seconds), "tier-stats")
        key = self.settings.cache_reader_key.get_secret_value()
        if key:
            self._readers = TierReaders(self.tier, key, self.kv.keys)
            self.spawn(self._readers.follow(self.settings.cache_readers_interval_seconds),
                       "tier-readers")
        await self.consume(DurableConsumer(
            self.bus, stream="CACHE", durable="cache-hydrator-requests",
            subject=subjects.cache_requests(), message_type=cache_pb2.CacheDatasetRequest,
            handler=self._on_request, max_deliver=100, ack_wait=60.0))

    async def teardown(self) -> None:
        for hydration, task in list(self.jobs.values()):
            hydration.stop()
            task.cancel()
        await asyncio.gather(*(t for _, t in self.jobs.values()), return_exceptions=True)
        if self._tier is not None:
            self._tier.close()

    # -- requests ---------------------------------------------------------------------------

    async def _on_request(self, _subject: str, message: cache_pb2.CacheDatasetRequest) -> None:
        request = request_from_proto(message)
        if isinstance(request, AddRequest):
            try:
                await self._add(request)
            except InvalidRequestError as e:
                await self._refuse(request, str(e))
                raise  # and the error event, as for every refused request
        else:
            await self._remove(request)

    async def _refuse(self, request: AddRequest, why: str) -> None:
        """Answer a refused add on the data set's status subject, with its request id and the
        spec it asked for, so the asker (a Dataset object, through kube-bridge) can show why.
        Only published: the bucket keeps the data set that is there."""
        assert self.bus is not None
        answer = DatasetStatus(request.spec, Phase.FAILED, request.request_id, message=why,
                               reason="invalid-spec")
        with contextlib.suppress(BusUnavailableError):
            await self.bus.publish(subjects.cache_status(request.spec.key), answer.to_proto())

    async def _add(self, request: AddRequest) -> None:
        spec = request.spec
        if spec.key in self._revoking:
            raise TierBusyError(f"data set {spec.name!r} is being released (its source is no "
                                "longer allowed); asked again shortly",
                                retry_after=self.settings.cache_tier_retry_seconds)
        old = await self._status(spec.key)
        if old is not None:
            if not old.spec.same_data(spec):
                if old.phase not in (Phase.FAILED, Phase.EVICTED):
                    raise InvalidRequestError(
                        f"data set {spec.name!r} already exists with other data (source "
                        f"{old.spec.source}, owner {old.spec.owner or 'unknown'}); remove it "
                        "first or choose another name")
                # A failed or evicted data set is replaced: what it had cached is released.
                await self._release(spec.key, spec.name)
            elif old.phase in ACTIVE and spec.key in self.jobs:
                await self._put(old.evolve(spec=spec, request_id=request.request_id))
                return
            elif old.phase is Phase.READY and await self._still_cached(spec.key):
                await self._put(old.evolve(spec=spec, request_id=request.request_id))
                return
        status = DatasetStatus(spec, Phase.PENDING, request.request_id,
                               message="waiting to list the source")
        await self._put(status)
        self._start(status)
        if self._readers is not None:
            self._readers.poke()

    async def _remove(self, request: RemoveRequest) -> None:
        old = await self._status(request.key)
        if old is None:
            raise InvalidRequestError(f"there is no data set {request.name!r} to remove")
        job = self.jobs.pop(request.key, None)
        if job is not None:
            job[0].stop()
            await asyncio.gather(job[1], return_exceptions=True)
        freed = await self._release(request.key, request.name)
        await self._put(old.evolve(phase=Phase.REMOVED, request_id=request.request_id,
                                   cached_bytes=0, files_cached=0, reason="",
                                   message=f"removed; {freed} bytes freed in the tier"))
        assert self.kv is not None
        await self.kv.delete(_bucket_key(request.key))
        if self._readers is not None:
            self._readers.poke()

    async def _release(self, key: str, name: str) -> int:
        """Drop every reference ``key`` holds and its manifest; bytes freed."""
        try:
            tier = await asyncio.to_thread(self.tier)
            freed = await asyncio.to_thread(tier.release, key)
            await asyncio.to_thread(tier.drop_manifest, key)
        except DatasetError as e:
            raise TierBusyError(f"releasing {name!r}: {e}",
                                retry_after=self.settings.cache_tier_retry_seconds) from e
        return freed

    async def _still_cached(self, key: str) -> bool:
        """Whether the tier still holds a READY data set (a Redis that restarted empty loses
        it: adding it again then re-hydrates it instead of answering READY)."""
        try:
            tier = await asyncio.to_thread(self.tier)
            return bool(await asyncio.to_thread(tier.meta, key))
        except DatasetError as e:
            raise TierBusyError(f"checking {key!r} in the tier: {e}",
                                retry_after=self.settings.cache_tier_retry_seconds) from e

    # -- hydration --------------------------------------------------------------------------

    def tier(self) -> CacheTier:
        """The tier, connected on first use (a tier that is down does not stop the service)."""
        if self._tier is None:
            s = self.settings
            self._tier = open_tier(s.tier_url, budget_bytes=s.cache_budget_bytes,
                                   prefix=s.cache_prefix)
        return self._tier

    def source(self, spec: DatasetSpec) -> Source:
        s = self.settings
        options: dict[str, Any] = {}
        if s.cache_s3_endpoint_url:
            options["endpoint_url"] = s.cache_s3_endpoint_url
        if spec.namespace in self.s3_profiles:
            options["profile"] = self.s3_profiles[spec.namespace]
        self.source_rules.check(spec.namespace, spec.source)
        return open_source(spec.source, include=spec.include, exclude=spec.exclude,
                           s3_options=options)

    def _chunk_addresses(self, spec: DatasetSpec) -> Callable[[bytes], str]:
        """How a data set's chunks are addressed. A namespace's read-only tier user (what its
        pods read with) may GET any chunk by address, and an address that is the plain
        SHA-256 of the bytes lets it confirm whether anyone cached content it can guess (a
        file of few possible values). So the chunks of a source that rules allow only some
        namespaces to cache are addressed under a key of those namespaces, derived from the
        reader key: deduplicated among them, unguessable to the others. Plain SHA-256, shared
        by every data set, where any tenant may cache the source anyway (a rule for every
        namespace allows it), in local mode (no namespace), and where no pod reads the tier
        (no reader key)."""
        key = self.settings.cache_reader_key.get_secret_value()
        try:
            readers = self.source_rules.readers(spec.source) if spec.namespace else None
        except DatasetError:
            return chunk_id  # a malformed source: the hydration refuses it when it opens it
        if not key or readers is None:
            return chunk_id
        domain = "chunks:" + ",".join(sorted(readers | {spec.namespace}))
        return keyed_chunk_ids(hmac.new(key.encode(), domain.encode(), hashlib.sha256).digest())

    def _start(self, status: DatasetStatus) -> None:
        key = status.spec.key
        hydration = Hydration(status, self.tier, lambda: self.source(status.spec), self._put,
                              status_interval=self.settings.cache_status_interval_seconds,
                              tier_retry=self.settings.cache_tier_retry_seconds,
                              bytes_per_second=self.settings.cache_hydrate_bytes_per_second,
                              make_room=self._make_room,
                              threads=self.settings.cache_hydrate_threads,
                              address=self._chunk_addresses(status.spec))
        task = asyncio.create_task(self._hydrate(key, hydration), name=f"hydrate:{key}")
        self.jobs[key] = (hydration, task)

    async def _hydrate(self, key: str, hydration: Hydration) -> DatasetStatus:
        try:
            async with self._slots:
                final = await hydration.run()
                OUTCOMES.labels(final.phase.name.lower(), final.reason or "none").inc()
                return final
        except Exception as e:  # a bug must fail this data set, not the service
            self.log.exception("hydration crashed", dataset=key)
            return await hydration._fail("internal-error", f"hydration crashed: {e!r}")
        finally:
            current = self.jobs.get(key)
            if current is not None and current[0] is hydration:
                del self.jobs[key]

    async def _make_room(self, for_key: str, needed: int) -> tuple[list[str], list[str]]:
        """Evict READY data sets that are neither pinned nor being read (no live reader lease,
        no live workload naming it), least recently read first, until ``needed`` bytes are
        free or none is left."""
        assert self.kv is not None
        tier = self.tier()
        candidates: list[tuple[float, str, DatasetStatus]] = []
        kept: list[str] = []
        for key in await self.kv.keys():
            status = await self._status(key)
            if key == for_key or status is None or status.phase is not Phase.READY:
                continue
            if status.spec.pin:
                kept.append(f"{key} (pinned)")
            elif (key in self.jobs or key in self.workload_readers.reading()
                  or await asyncio.to_thread(tier.readers, key)):
                kept.append(f"{key} (being read)")
            else:
                meta = await asyncio.to_thread(tier.meta, key)
                candidates.append((float(meta.get("last_read", 0)), key, status))
        evicted: list[str] = []
        freed = 0
        for _last, key, status in sorted(candidates):
            if freed >= needed:
                break
            gone = await asyncio.to_thread(tier.release, key)
            await asyncio.to_thread(tier.drop_manifest, key)
            freed += gone
            evicted.append(key)
            EVICTIONS.inc()
            self.log.info("evicted", dataset=key, freed_bytes=gone, for_dataset=for_key)
            await self._put(status.evolve(
                phase=Phase.EVICTED, reason="evicted", cached_bytes=0, files_cached=0,
                message=f"evicted to make room for {for_key} ({gib(gone)} freed); add it "
                        "again to hydrate it"))
        return evicted, kept

    # -- state ------------------------------------------------------------------------------

    def _disallowed(self, status: DatasetStatus) -> DatasetError | None:
        """Why a recorded data set's source is outside the rules this hydrator started with
        (the operator narrowed them, or a source recorded by an older version is now
        refused as malformed); None when allowed, or when nothing of it is cached."""
        if status.phase is Phase.REMOVED or (status.phase is Phase.FAILED
                                             and status.reason in REFUSED and not status.cached_bytes):
            return None
        try:
            self.source_rules.check(status.spec.namespace, status.spec.source)
        except (PathNotAllowedError, InvalidSpecError) as e:
            return e
        return None

    async def _revoke(self, status: DatasetStatus, why: DatasetError) -> None:
        """A data set whose source the rules no longer allow: what it cached is released (its
        readers then go to the source, with their own rights) and it fails with the reason. A
        tier that is down is asked again until it answers: the revocation is not dropped."""
        key = status.spec.key
        self.log.warning("source no longer allowed: releasing the data set", dataset=key,
                         source=status.spec.source, reason=why.reason)
        while True:
            try:
                freed = await self._release(key, status.spec.name)
                break
            except TierBusyError as e:
                self.log.warning("tier busy; revoking again later", dataset=key, error=str(e))
                await asyncio.sleep(e.retry_after)
        await self._put(status.evolve(
            phase=Phase.FAILED, reason=why.reason, cached_bytes=0, files_cached=0,
            message=f"{why}; it was cached under earlier rules, so its {freed} cached bytes "
                    "were released"))
        self._revoking.discard(key)

    async def _status(self, key: str) -> DatasetStatus | None:
        assert self.kv is not None
        found = await self.kv.get(_bucket_key(key))
        return None if found is None else DatasetStatus.from_proto(found.value)

    async def _put(self, status: DatasetStatus) -> None:
        """Record the status in the bucket, then publish it (a restart resumes from the
        bucket; watchers see the subject). ``nodes`` says where the cached bytes are local to
        a reader: the scheduler's data-locality preference reads it from the bucket."""
        assert self.kv is not None and self.bus is not None
        message = status.to_proto()
        if status.cached_bytes:  # hot where the tier is local; nowhere while nothing is in
            message.nodes[:] = self.settings.tier_nodes
        labels = (status.spec.namespace, status.spec.name)
        if status.phase is Phase.REMOVED:
            for gauge in (DATASET_PROGRESS, DATASET_BYTES):
                with contextlib.suppress(KeyError):
                    gauge.remove(*labels)
        else:
            DATASET_PROGRESS.labels(*labels).set(status.progress)
            DATASET_BYTES.labels(*labels).set(status.cached_bytes)
        await self.kv.put(_bucket_key(status.spec.key), message)
        with contextlib.suppress(BusUnavailableError):
            await self.bus.publish(subjects.cache_status(status.spec.key), message)


def _bucket_key(key: str) -> str:
    return key  # names and namespaces are [A-Za-z0-9_-], joined by "." — valid KV keys
