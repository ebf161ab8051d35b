"""The scheduler service: wires the bus to the engine.

On start the model is rebuilt before anything is placed: committed shares from the
``gpu_allocations`` bucket, inventories from the ``node_inventory`` bucket (watched for
changes), every workload's and PodGroup's last state from the ``workload_states`` and
``podgroup_states`` buckets the adapters keep, then the streams' events from a little before
that read (``replay_overlap_seconds``). What a restart reads is the current state, not every
workload that ever ran. Only when the watch and those consumers have caught up with what
existed at start does the placement cycle start — see ``_engine``.

The overlap covers the moment between an adapter publishing an event and writing its record
(``LifecyclePublisher`` publishes first): an event whose record is not written yet when the
buckets are read is still in the overlap window of the stream.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from google.protobuf.message import Message
from pydantic import Field

from alnair.v1 import (
    cache_pb2,
    commands_pb2,
    inventory_pb2,
    metrics_pb2,
    scheduling_pb2,
    workload_pb2,
)
from alnair_common import (
    DurableConsumer,
    KVWatch,
    NotCaughtUpError,
    PermanentError,
    Service,
    ServiceSettings,
    TypedKV,
    subjects,
)

from . import _convert
from ._domain import SCHEDULER_NAME, Profile
from ._engine import Engine
from ._outbox import Outbox
from ._store import AllocationStore
from ._utilisation import UtilisationTracker

INVENTORY_BUCKET = subjects.NODE_INVENTORY_BUCKET
WORKLOAD_STATES_BUCKET = subjects.WORKLOAD_STATES_BUCKET
PODGROUP_STATES_BUCKET = subjects.PODGROUP_STATES_BUCKET
CACHE_DATASETS_BUCKET = subjects.CACHE_DATASETS_BUCKET
M = TypeVar("M", bound=Message)


class SchedulerSettings(ServiceSettings):
    scheduling_profile: Literal["cost-saving", "high-performance", "utilisation-aware"] = Field(
        "cost-saving", description="Profile for workloads without the scheduling-profile annotation")
    scheduler_name: str = Field(SCHEDULER_NAME, description="schedulerName of the workloads we place")
    instance_id: str = Field(default_factory=lambda: f"scheduler-{uuid.uuid4().hex[:8]}",
                             description="This instance's name on its decisions")
    consumer_prefix: str = Field("scheduler", pattern=r"^[A-Za-z0-9_-]+$",
                                 description="Prefix of this scheduler's durable consumer names")
    utilisation_window_seconds: float = Field(60.0, gt=0, le=3600)
    tick_seconds: float = Field(1.0, gt=0, le=60, description="Longest pause between cycles")
    replay_timeout_seconds: float = Field(120.0, gt=0)
    replay_overlap_seconds: float = Field(
        300.0, gt=0, le=7 * 86400,
        description="Stream events this far back are read again after the buckets' state")
    gang_reserve_after_seconds: float = Field(
        30.0, ge=0, le=86400,
        description="A complete PodGroup that has not fitted for this long holds later workloads "
                    "back so it is not starved (0: never)")
    dataset_locality_weight: float = Field(
        1.0, ge=0, le=10,
        description="Weight of the data-locality score term: among the cards that fit, nodes "
                    "where the workload's data sets are hot (cache_datasets) are preferred; 1: a "
                    "node holding all the data beats any holding none, 0: off")
    reason_refresh_seconds: float = Field(
        5.0, ge=0, le=3600, description="Least time between two pending reasons with the same code")


class SchedulerService(Service):
    name = "scheduler"
    role = ("places fractional-GPU workloads on cards (cost-saving, high-performance, "
            "utilisation-aware), gangs all-or-nothing, CAS-committed allocations")
    settings_class = SchedulerSettings
    # Replicas stand by; one leads (a lease in the bus's `leases` bucket): two would both act.
    # Schedulers with their own consumers (another consumer_prefix, e.g. a second
    # schedulerName) are not replicas: each has its own lease and CAS keeps them apart.
    leader_elected = True

    @property
    def lease_name(self) -> str:
        return f"scheduler-{self.settings.consumer_prefix}"  # type: ignore[attr-defined]

    async def setup(self) -> None:
        s: SchedulerSettings = self.settings  # type: ignore[assignment]
        assert self.bus is not None
        bus = self.bus
        store = await AllocationStore.open(bus)
        self.engine = Engine(
            store, Outbox(bus, s.instance_id, refresh_seconds=s.reason_refresh_seconds), instance=s.instance_id,
            default_profile=Profile(s.scheduling_profile), scheduler_name=s.scheduler_name,
            util=UtilisationTracker(s.utilisation_window_seconds),
            gang_reserve_after_seconds=s.gang_reserve_after_seconds,
            dataset_locality_weight=s.dataset_locality_weight)
        restored = await self.engine.restore()
        self.health.checks["replay"] = self._check_replay
        watch = await self._watch_inventory_bucket()
        datasets = await self._watch_datasets_bucket()
        # State, not history: the last event of every workload and the last state of every
        # PodGroup, as the adapters keep them, then the streams only from a little before
        # that read (re-applying an event is harmless: the engine drops what is not news).
        # A restart thus costs what is current, not every workload that ever ran.
        recent = datetime.now(UTC) - timedelta(seconds=s.replay_overlap_seconds)
        restored_workloads = await self._restore_from_bucket(
            WORKLOAD_STATES_BUCKET, workload_pb2.WorkloadEvent, self._on_workload)
        restored_gangs = await self._restore_from_bucket(
            PODGROUP_STATES_BUCKET, commands_pb2.PodGroup, self._on_podgroup)
        p = s.consumer_prefix
        replayed = [
            ("INVENTORY", f"{p}-inventory", "alnair.node.*.inventory", inventory_pb2.NodeInventory,
             self._on_inventory),
            ("WORKLOADS", f"{p}-podgroups", subjects.podgroup_events(), commands_pb2.PodGroup,
             self._on_podgroup),
            ("WORKLOADS", f"{p}-workloads", subjects.workload_events(), workload_pb2.WorkloadEvent,
             self._on_workload),
        ]
        replaying: list[DurableConsumer | KVWatch[Any]] = [watch, datasets]
        for stream, durable, subject, message_type, handler in replayed:
            replaying.append(await self.consume(DurableConsumer(
                bus, stream=stream, durable=durable, subject=subject, message_type=message_type,
                handler=handler, batch=256, fetch_timeout=0.5, start_time=recent)))
        await self.consume(DurableConsumer(
            bus, stream="SCHEDULING", durable=f"{p}-bound", subject=subjects.sched_bound(),
            message_type=scheduling_pb2.BindResult, handler=self._on_bound, fetch_timeout=0.5))
        await bus.subscribe("alnair.metrics.gpu.*", metrics_pb2.NodeSampleBatch, self._on_samples)
        self.spawn(self._activate_after_replay(replaying), "replay-gate")
        self.spawn(self.engine.loop(self._stop, s.tick_seconds), "scheduling-loop")
        self.log.info("model restored", shares=restored, nodes=len(self.engine.cluster.nodes),
                      workloads=restored_workloads, gangs=restored_gangs)

    async def _restore_from_bucket(self, bucket: str, message_type: type[M],
                                   handler: Callable[[str, M], Awaitable[None]]) -> int:
        """Hand every current record of ``bucket`` to ``handler`` as if it had just arrived;
        a record the engine refuses is logged and skipped, as its event was."""
        assert self.bus is not None
        records = await (await TypedKV.open(self.bus, bucket, message_type)).current(
            timeout=self.settings.replay_timeout_seconds)  # type: ignore[attr-defined]
        for key, record in records.items():
            try:
                await handler(f"$KV.{bucket}.{key}", record)
            except PermanentError as e:
                self.log.warning("record not restored", bucket=bucket, key=key, error=str(e))
        return len(records)

    async def _check_replay(self) -> str | None:
        return None if self.engine.active else "replaying workload events"

    async def _watch_inventory_bucket(self) -> KVWatch[inventory_pb2.NodeInventory]:
        """Inventories as nodes write them, current ones first; a delete changes nothing
        here, and a value that does not decode is skipped by the watch."""
        assert self.bus is not None
        kv = await TypedKV.open(self.bus, INVENTORY_BUCKET, inventory_pb2.NodeInventory)
        watch = await kv.watch()

        async def follow() -> None:
            async for update in watch:
                if update.value is None:
                    continue
                try:
                    self._apply_inventory(update.value)
                except Exception as e:  # noqa: BLE001 - one bad entry must not stop the watch
                    self.log.warning("bad node_inventory entry ignored", key=update.key, error=str(e))

        self.spawn(follow(), "inventory-bucket-watch")
        return watch

    async def _watch_datasets_bucket(self) -> KVWatch[cache_pb2.CacheDatasetStatus]:
        """Where each data set is hot, as the cache hydrator records it; current values first
        (placement waits for them after a restart), then changes. A deleted key (a removed
        data set) is no longer hot anywhere."""
        assert self.bus is not None
        kv = await TypedKV.open(self.bus, CACHE_DATASETS_BUCKET, cache_pb2.CacheDatasetStatus)
        watch = await kv.watch()

        async def follow() -> None:
            async for update in watch:
                try:
                    if update.value is None:
                        self.engine.on_dataset_gone(update.key)
                    else:
                        self.engine.on_dataset(_convert.dataset_location(update.value))
                except Exception as e:  # noqa: BLE001 - one bad entry must not stop the watch
                    self.log.warning("bad cache_datasets entry ignored", key=update.key,
                                     error=str(e))

        self.spawn(follow(), "datasets-bucket-watch")
        return watch

    async def _activate_after_replay(
            self, replaying: list[DurableConsumer | KVWatch[Any]]) -> None:
        s: SchedulerSettings = self.settings  # type: ignore[assignment]
        deadline = time.monotonic() + s.replay_timeout_seconds
        try:
            for each in replaying:
                await each.caught_up(max(0.0, deadline - time.monotonic()))
        except NotCaughtUpError as e:
            self.log.warning("replay not finished in time; placing anyway",
                             timeout_s=s.replay_timeout_seconds, error=str(e))
        await self.engine.activate()
        self.log.info("replay done; placing", workloads=len(self.engine.workloads),
                      gangs=len(self.engine.gangs))

    def _apply_inventory(self, inv: inventory_pb2.NodeInventory) -> None:
        self.engine.on_inventory(inv.node, _convert.cards_from_inventory(inv),
                                 _convert.inventory_time(inv), inv.simulated)

    async def _on_inventory(self, _: str, inv: inventory_pb2.NodeInventory) -> None:
        self._apply_inventory(inv)

    async def _on_podgroup(self, _: str, pg: commands_pb2.PodGroup) -> None:
        self.engine.on_gang(_convert.gang_from_proto(pg, time.time()))

    async def _on_workload(self, _: str, event: workload_pb2.WorkloadEvent) -> None:
        w = _convert.workload_from_event(event)
        await self.engine.on_workload(w, event.workload.assignment.gpu_uuid)

    async def _on_bound(self, _: str, result: scheduling_pb2.BindResult) -> None:
        await self.engine.on_bind_result(*_convert.bind_result(result))

    async def _on_samples(self, _: str, batch: metrics_pb2.NodeSampleBatch) -> None:
        for sample in _convert.samples_from_batch(batch, time.monotonic()):
            self.engine.util.add(sample)
