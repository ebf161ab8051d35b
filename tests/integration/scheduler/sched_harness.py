"""Bus-level harness for the scheduler: an adapter that publishes what kube-bridge or the
local agent would, an observer of everything the scheduler says, and the scheduler itself
run in-process against the test's real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import (
    allocation_pb2,
    commands_pb2,
    common_pb2,
    inventory_pb2,
    scheduling_pb2,
    workload_pb2,
)
from alnair_common import Bus, TypedKV, ensure_streams, subjects
from alnair_common.testing import wait_for
from alnair_scheduler import POD_GROUP_LABEL, PROFILE_ANNOTATION, SchedulerService, SchedulerSettings

GIB = 1024**3
_seq = itertools.count(1)


def stamp(seconds: float | None = None) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int((time.time() if seconds is None else seconds) * 1e9))
    return ts


@dataclass
class Pod:
    uid: str
    name: str
    namespace: str
    memory_gib: int
    compute_percent: int
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    node: str = ""  # where the adapter reported it bound (its later events carry it)

    def ref(self) -> common_pb2.WorkloadRef:
        return common_pb2.WorkloadRef(uid=self.uid, name=self.name, namespace=self.namespace,
                                      mode=common_pb2.MODE_KUBERNETES)


class Adapter:
    """Publishes inventories, PodGroups and workload lifecycle events like kube-bridge: its
    events say ``source="kube-bridge"`` and, once a pod is bound, carry the pod's node."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.pods: dict[str, Pod] = {}

    async def inventory(self, node: str, cards: list[tuple[int, int]] | int = 1,
                        memory_gib: int = 80, *, unhealthy: tuple[int, ...] = (),
                        via_kv: bool = False) -> list[str]:
        if isinstance(cards, int):
            cards = [(memory_gib, 100)] * cards
        gpus = []
        for i, (mem, comp) in enumerate(cards):
            bad = i in unhealthy
            gpus.append(inventory_pb2.Gpu(
                uuid=f"GPU-{node}-{i}", index=i, model="NVIDIA H200", memory_bytes=mem * GIB,
                health=inventory_pb2.GPU_HEALTH_UNHEALTHY if bad else inventory_pb2.GPU_HEALTH_HEALTHY,
                health_reason="XID 79: GPU has fallen off the bus" if bad else "",
                vgpu_memory_gib=mem, vgpu_compute_percent=comp))
        inv = inventory_pb2.NodeInventory(node=node, gpus=gpus, observed_at=stamp(),
                                          driver_version="580.159.04", cuda_version="13.0")
        if via_kv:
            kv = await TypedKV.open(self.bus, "node_inventory", inventory_pb2.NodeInventory)
            await kv.put(node, inv)
        else:
            await self.bus.publish(subjects.node_inventory(node), inv)
        return [g.uuid for g in gpus]

    async def pending(self, name: str, memory_gib: int, compute_percent: int, *,
                      namespace: str = "default", profile: str | None = None,
                      group: str | None = None, scheduler: str = "alnair-scheduler",
                      request: bool = True, annotations: dict[str, str] | None = None) -> Pod:
        pod = Pod(uuid.uuid4().hex, name, namespace, memory_gib, compute_percent,
                  annotations=dict(annotations or {}))
        if profile is not None:
            pod.annotations[PROFILE_ANNOTATION] = profile
        if group is not None:
            pod.labels[POD_GROUP_LABEL] = group
        self.pods[pod.uid] = pod
        await self._event(pod, workload_pb2.WORKLOAD_PHASE_PENDING, scheduler=scheduler,
                          with_request=request)
        return pod

    async def bound(self, pod: Pod, decision: scheduling_pb2.BindDecision) -> None:
        pod.node = decision.assignment.node
        await self._event(pod, workload_pb2.WORKLOAD_PHASE_BOUND, assignment=decision.assignment)

    async def running(self, pod: Pod) -> None:
        await self._event(pod, workload_pb2.WORKLOAD_PHASE_RUNNING)

    async def finish(self, pod: Pod, phase: int = workload_pb2.WORKLOAD_PHASE_SUCCEEDED) -> None:
        await self._event(pod, phase)

    async def forge(self, pod: Pod, phase: int = workload_pb2.WORKLOAD_PHASE_SUCCEEDED, *,
                    node: str | None = None, source: str = "kube-bridge") -> None:
        """An event for ``pod`` as someone else would publish it: another ``node``, another
        ``source`` (the sequence is the next one, as a forger would choose)."""
        await self._event(pod, phase, node=pod.node if node is None else node, source=source)

    async def _event(self, pod: Pod, phase: int, *, scheduler: str = "alnair-scheduler",
                     with_request: bool = True,
                     assignment: common_pb2.GpuAssignment | None = None,
                     node: str | None = None, source: str = "kube-bridge") -> None:
        w = workload_pb2.Workload(
            ref=pod.ref(), scheduler_name=scheduler, phase=phase, labels=pod.labels,
            annotations=pod.annotations, created_at=stamp(pod.created),
            node=pod.node if node is None else node)
        if with_request:
            w.request.CopyFrom(common_pb2.GpuRequest(memory_gib=pod.memory_gib,
                                                     compute_percent=pod.compute_percent))
        if assignment is not None:
            w.assignment.CopyFrom(assignment)
        await self.bus.publish(subjects.workload_events(), workload_pb2.WorkloadEvent(
            workload=w, observed_at=stamp(), sequence=next(_seq), source=source))

    async def podgroup(self, name: str, min_member: int, timeout_s: int = 0, *,
                       namespace: str = "default", deleted: bool = False) -> None:
        await self.bus.publish(subjects.podgroup_events(), commands_pb2.PodGroup(
            ref=commands_pb2.ObjectRef(api_version="alnair.centaurus.io/v1alpha1", kind="PodGroup",
                                       namespace=namespace, name=name, uid=f"pg-{name}"),
            min_member=min_member, schedule_timeout_seconds=timeout_s, created_at=stamp(),
            deleted=deleted))


class Observer:
    """Everything the scheduler publishes, by workload uid."""

    def __init__(self) -> None:
        self.binds: dict[str, scheduling_pb2.BindDecision] = {}
        self.bind_count: dict[str, int] = defaultdict(int)
        self.failures: dict[str, list[scheduling_pb2.SchedulingFailure]] = defaultdict(list)
        self.events: list[commands_pb2.RecordEventCommand] = []
        self.statuses: dict[str, list[dict]] = defaultdict(list)

    @classmethod
    async def attach(cls, bus: Bus) -> Observer:
        await ensure_streams(bus)
        o = cls()

        async def on_bind(_: str, m: scheduling_pb2.BindDecision) -> None:
            o.binds[m.workload.uid] = m
            o.bind_count[m.workload.uid] += 1

        async def on_failed(_: str, m: scheduling_pb2.SchedulingFailure) -> None:
            o.failures[m.workload.uid].append(m)

        async def on_event(_: str, m: commands_pb2.RecordEventCommand) -> None:
            o.events.append(m)

        async def on_status(_: str, m: commands_pb2.StatusUpdateCommand) -> None:
            o.statuses[f"{m.object.namespace}/{m.object.name}"].append(json.loads(m.status_json))

        await bus.subscribe(subjects.sched_bind(), scheduling_pb2.BindDecision, on_bind)
        await bus.subscribe(subjects.sched_failed(), scheduling_pb2.SchedulingFailure, on_failed)
        await bus.subscribe(subjects.cmd_event(), commands_pb2.RecordEventCommand, on_event)
        await bus.subscribe(subjects.cmd_status(), commands_pb2.StatusUpdateCommand, on_status)
        await bus.nc.flush()
        return o

    async def bound(self, *pods: Pod, timeout: float = 10.0) -> list[scheduling_pb2.BindDecision]:
        async def probe() -> bool:
            return all(p.uid in self.binds for p in pods)

        await wait_for(probe, timeout=timeout, what=f"bind decisions for {len(pods)} pods")
        return [self.binds[p.uid] for p in pods]

    async def failed(self, pod: Pod, code: str | None = None,
                     timeout: float = 10.0) -> tuple[scheduling_pb2.SchedulingFailure, str]:
        """The latest failure of ``pod`` (with ``code``, from its FailedScheduling event)."""

        async def probe() -> tuple[scheduling_pb2.SchedulingFailure, str] | None:
            fails = self.failures.get(pod.uid)
            for e in reversed(self.events):
                if e.object.uid != pod.uid or e.reason != "FailedScheduling":
                    continue
                seen = e.message.split("]", 1)[0].lstrip("[")
                if fails and (code is None or seen == code):
                    return fails[-1], seen
                return None
            return None

        return await wait_for(probe, timeout=timeout, what=f"failure {code} for {pod.name}")

    async def status(self, group: str, phase: str, timeout: float = 10.0,
                     namespace: str = "default", says: str = "") -> dict:
        """The group's newest status once it is ``phase`` (and its message has ``says``): a
        gang's status follows its members' events, so it may still tell of fewer members."""
        async def probe() -> dict | None:
            seen = self.statuses.get(f"{namespace}/{group}", [])
            return seen[-1] if seen and seen[-1]["phase"] == phase and says in seen[-1]["message"] else None

        return await wait_for(probe, timeout=timeout, what=f"PodGroup {group} {phase}")


async def start_scheduler(url: str, **settings: object) -> tuple[SchedulerService, asyncio.Task]:
    service = SchedulerService(SchedulerSettings(nats_url=url, node_name="test", **settings))
    task = asyncio.create_task(service.run())
    await wait_for(lambda: _ready(service, task), timeout=20, what="scheduler ready")
    await wait_for(_active(service), timeout=30, what="scheduler replayed the bus")
    return service, task


async def _ready(service: SchedulerService, task: asyncio.Task) -> bool:
    if task.done():
        task.result()
    return service.ready.is_set()


def _active(service: SchedulerService):
    async def probe() -> bool:
        return service.engine.active

    return probe


async def stop_scheduler(service: SchedulerService, task: asyncio.Task) -> None:
    service.request_stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 20)


async def committed(bus: Bus) -> dict[str, allocation_pb2.CardAllocation]:
    kv = await TypedKV.open(bus, "gpu_allocations", allocation_pb2.CardAllocation)
    out = {}
    for key in await kv.keys():
        entry = await kv.get(key)
        if entry is not None:
            out[entry.value.gpu_uuid] = entry.value
    return out


async def assert_within_capacity(bus: Bus) -> dict[str, allocation_pb2.CardAllocation]:
    """No card in KV holds more than its capacity, and no workload holds two shares."""
    cards = await committed(bus)
    owners: dict[str, str] = {}
    for uuid_, a in cards.items():
        mem = sum(s.memory_gib for s in a.shares)
        comp = sum(s.compute_percent for s in a.shares)
        assert mem <= a.capacity_memory_gib, f"{uuid_}: {mem} GiB committed > {a.capacity_memory_gib}"
        assert comp <= a.capacity_compute_percent, f"{uuid_}: {comp} % committed > capacity"
        for s in a.shares:
            assert s.workload.uid not in owners, f"{s.workload.uid} holds shares on two cards"
            owners[s.workload.uid] = uuid_
    return cards
