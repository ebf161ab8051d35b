"""The profiler service: follow workloads and their samples, write one profile per workload.

Inputs: ``alnair.workload.events`` through a durable consumer (lifecycle, both modes), and
the core subjects ``alnair.metrics.gpu.*`` and ``alnair.metrics.cuda.*.*`` (samples). When a
workload reaches a terminal phase its profile is computed from what was gathered, merged with
Prometheus' cAdvisor maxima for Kubernetes pods, written (upsert by uid; spooled while the
store is away), aggregated to its owners, published on ``alnair.profile.completed`` and, for
pods, patched as annotations through ``alnair.cmd.annotate``.

Idempotence: a workload whose profile exists (or waits in the spool) is final — replayed
events change nothing, late samples are dropped. Running workloads are checkpointed to the
store every few seconds and at shutdown, so a restart continues their series.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import ClassVar

from alnair.v1 import commands_pb2, metrics_pb2, workload_pb2
from alnair_common import AlnairError, DurableConsumer, Service, get_logger, subjects

from ._accumulator import WorkloadState
from ._domain import Rejected, WorkloadInfo, point_from_cuda, points_from_batch, workload_from_event
from ._metrics import COMPLETED, REJECTED, WAITING
from ._profile import OwnerProfile, WorkloadProfile
from ._prometheus import PrometheusClient, PrometheusError
from ._settings import ProfilerSettings
from ._store import ProfileStore, StoreUnavailableError, open_store
from ._writer import RecordWriter

log = get_logger("alnair.profiler")
FINAL_MEMORY = 100_000


class ProfilerService(Service):
    name = "profiler"
    role = ("profiles every workload: maxima and deciles of CPU, memory, I/O, network, GPU and "
            "copies; training detection; peak-memory prediction; one record per workload")
    settings_class: ClassVar[type[ProfilerSettings]] = ProfilerSettings  # type: ignore[assignment]
    settings: ProfilerSettings

    def __init__(self, settings: ProfilerSettings) -> None:  # type: ignore[override]
        super().__init__(settings)
        self.states: dict[str, WorkloadState] = {}
        self.final: dict[str, int] = {}
        self.store: ProfileStore | None = None
        self.writer: RecordWriter | None = None
        self.prometheus = (PrometheusClient(settings.prometheus_url,
                                            rate_window_seconds=settings.prometheus_rate_window_seconds,
                                            resolution_seconds=settings.prometheus_resolution_seconds,
                                            timeout_seconds=settings.prometheus_timeout_seconds)
                           if settings.prometheus_url else None)
        self._warned_rejects = 0

    async def setup(self) -> None:
        s = self.settings
        self.store = open_store(mongo_url=s.mongo_url, database=s.mongo_database,
                                collection=s.mongo_collection, embedded_dir=s.embedded_dir,
                                timeout_seconds=s.store_timeout_seconds)
        self.writer = RecordWriter(self.store, s.spool_dir, self._owner_done)
        self.health.checks["store"] = self._check_store
        assert self.bus is not None
        await self.bus.subscribe(subjects.spec_for(subjects.gpu_metrics("node")).wildcard,
                                 metrics_pb2.NodeSampleBatch, self._on_batch)
        await self.bus.subscribe(subjects.spec_for(subjects.cuda_metrics("node", "workload")).wildcard,
                                 metrics_pb2.CudaSample, self._on_cuda)
        self.spawn(self._start(), "profiler-start")

    async def _start(self) -> None:
        """Indexes and checkpoints first (retrying while the store is away), then events."""
        assert self.store is not None and self.bus is not None
        while True:
            try:
                await self.store.run(self.store.ensure_indexes)
                saved = await self.store.run(self.store.load_inflight)
                break
            except StoreUnavailableError as e:
                log.warning("store unavailable at start; retrying", error=str(e))
                await asyncio.sleep(self.settings.retry_interval_seconds)
        for doc in saved:
            restored = WorkloadState.from_doc(doc)
            if await self._stale_checkpoint(restored.uid):
                continue
            live = self.states.get(restored.uid)
            if live is not None:  # samples arrived while we were loading: keep both
                for name, series in live.series.items():
                    target = restored.series.setdefault(name, type(series)())
                    for t, v in zip(series.times, series.values, strict=True):
                        target.add(t, v)
                restored.launches += live.launches
            restored.first_seen = time.monotonic()
            self.states[restored.uid] = restored
        log.info("restored running workloads", count=len(saved))
        await self.consume(DurableConsumer(
            self.bus, stream="WORKLOADS", durable="profiler-workloads", subject=subjects.workload_events(),
            message_type=workload_pb2.WorkloadEvent, handler=self._on_event, max_deliver=2000, ack_wait=30.0))
        self.spawn(self._housekeeping(), "profiler-housekeeping")

    async def _stale_checkpoint(self, uid: str) -> bool:
        """A checkpoint whose workload already has its record (the profiler stopped between
        writing the record and deleting the checkpoint, or a checkpoint raced the end)."""
        assert self.store is not None
        try:
            if await self.store.run(self.store.get_profile, uid) is None:
                return False
            await self.store.run(self.store.delete_inflight, uid)
        except StoreUnavailableError as e:
            log.info("could not check a checkpoint; keeping it", uid=uid, error=str(e))
            return False
        self._remember_final(uid, 0)
        log.info("stale checkpoint of a profiled workload removed", uid=uid)
        return True

    async def teardown(self) -> None:
        await self._checkpoint(force=True)
        if self.store is not None:
            self.store.close()

    # -- events -------------------------------------------------------------------------------

    async def _on_event(self, _subject: str, event: workload_pb2.WorkloadEvent) -> None:
        info = workload_from_event(event)
        if await self._is_final(info.uid):
            log.debug("event for an already profiled workload ignored", uid=info.uid, phase=info.phase)
            return
        state = self.states.get(info.uid)
        if state is None:
            state = self.states[info.uid] = WorkloadState(info.uid, first_seen=time.monotonic())
        if state.info is not None and info.sequence and info.sequence <= state.info.sequence:
            log.debug("stale event ignored", uid=info.uid, sequence=info.sequence, seen=state.info.sequence)
            return
        state.info = info
        state.dirty = True
        if info.finished:
            await self._finish(state, info)

    async def _is_final(self, uid: str) -> bool:
        if uid in self.final or (self.writer is not None and self.writer.is_pending(uid)):
            return True
        if uid in self.states:
            return False
        assert self.store is not None
        record = await self.store.run(self.store.get_profile, uid)  # StoreUnavailable → retried
        if record is not None:
            self._remember_final(uid, int(record.get("sequence", 0)))
        return record is not None

    def _remember_final(self, uid: str, sequence: int) -> None:
        self.final[uid] = sequence
        while len(self.final) > FINAL_MEMORY:
            self.final.pop(next(iter(self.final)))

    async def _finish(self, state: WorkloadState, info: WorkloadInfo) -> None:
        assert self.writer is not None and self.bus is not None
        profile = state.profile(info)
        profile = await self._merge_prometheus(profile)
        self.states.pop(info.uid, None)
        self._remember_final(info.uid, info.sequence)
        written = await self.writer.submit(profile.to_doc())
        COMPLETED.labels("written" if written else "spooled").inc()
        try:
            await self.bus.publish(subjects.profile_completed(), profile.to_proto(), msg_id=f"profile-{info.uid}")
            if info.kubernetes:
                await self._annotate(f"profile-{info.uid}", profile.object_ref(), profile.annotations())
        except AlnairError as e:  # the record is safe; only the notification is lost
            log.error("profile stored but not announced on the bus", uid=info.uid, error=str(e))
        log.info("workload profiled", uid=info.uid, name=info.name, phase=info.phase,
                 training=profile.training.is_training, evidence=profile.training.evidence,
                 gpu_util_max=profile.summaries["gpu_utilization_ratio"].max, written=written)

    async def _merge_prometheus(self, profile: WorkloadProfile) -> WorkloadProfile:
        i = profile.info
        if self.prometheus is None or not i.kubernetes or i.started_at is None:
            return profile
        end = i.finished_at or max(i.started_at, datetime.now(UTC))
        budget = self.settings.prometheus_timeout_seconds
        try:
            # One budget for all queries: the record is due within a second of the end even
            # when Prometheus hangs.
            usage = await asyncio.wait_for(self.prometheus.pod_usage(i.namespace, i.name, i.started_at, end),
                                           budget)
        except TimeoutError:
            log.warning("Prometheus did not answer in time; profile written from bus samples only", uid=i.uid,
                        budget_seconds=budget)
            return profile
        except PrometheusError as e:
            log.warning("PromQL maxima not merged; profile written from bus samples only", uid=i.uid,
                        error=str(e))
            return profile
        return profile.with_series(usage.series).with_maxima(usage.maxima)

    async def _owner_done(self, owner: OwnerProfile) -> None:
        if not owner.owner.uid or not owner.namespace:
            return
        if not owner.annotatable:
            log.debug("owner kind not annotated; its record is in the store", kind=owner.owner.kind,
                      api_version=owner.owner.api_version, name=owner.owner.name)
            return
        await self._annotate(f"profile-owner-{owner.owner.uid}-{len(owner.workloads)}",
                             owner.object_ref(), owner.annotations())

    async def _annotate(self, command_id: str, ref: commands_pb2.ObjectRef, annotations: dict[str, str]) -> None:
        assert self.bus is not None
        command = commands_pb2.AnnotateCommand(command_id=command_id, object=ref, annotations=annotations)
        await self.bus.publish(subjects.cmd_annotate(), command, msg_id=command_id)

    # -- samples ------------------------------------------------------------------------------

    async def _on_batch(self, _subject: str, batch: metrics_pb2.NodeSampleBatch) -> None:
        for item in points_from_batch(batch):
            self._take(item)

    async def _on_cuda(self, _subject: str, sample: metrics_pb2.CudaSample) -> None:
        for item in point_from_cuda(sample):
            self._take(item)

    def _take(self, item: object) -> None:
        if isinstance(item, Rejected):
            REJECTED.labels(item.metric, item.why).inc()
            if self._warned_rejects < 100:
                self._warned_rejects += 1
                log.warning("impossible sample value dropped", uid=item.uid, metric=item.metric,
                            value=item.value, why=item.why)
            return
        uid = item.uid  # type: ignore[attr-defined]
        if uid in self.final:
            return
        state = self.states.get(uid)
        if state is None:
            log.info("samples for a workload not (yet) seen on alnair.workload.events", uid=uid)
            state = self.states[uid] = WorkloadState(uid, first_seen=time.monotonic())
        state.add(item)  # type: ignore[arg-type]

    # -- housekeeping -------------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        s = self.settings
        last_checkpoint = time.monotonic()
        while True:
            await asyncio.sleep(s.retry_interval_seconds)
            assert self.writer is not None
            WAITING.set(await self.writer.flush())
            now = time.monotonic()
            for uid, state in list(self.states.items()):
                if state.info is None and now - state.first_seen > s.unknown_sample_ttl_seconds:
                    log.warning("dropping samples of a workload no lifecycle event ever named", uid=uid,
                                after_seconds=s.unknown_sample_ttl_seconds)
                    self.states.pop(uid, None)
            if now - last_checkpoint >= s.checkpoint_interval_seconds:
                last_checkpoint = now
                await self._checkpoint()

    async def _checkpoint(self, *, force: bool = False) -> None:
        if self.store is None:
            return
        for state in list(self.states.values()):
            if state.info is None or not (state.dirty or force) or state.uid in self.final:
                continue
            try:
                await self.store.run(self.store.save_inflight, state.to_doc())
                state.dirty = False
            except StoreUnavailableError as e:
                log.info("checkpoint deferred; store unavailable", uid=state.uid, error=str(e))
                return

    async def _check_store(self) -> str | None:
        waiting = len(self.writer.pending) if self.writer else 0
        return f"{waiting} profiles waiting for the store" if waiting else None
