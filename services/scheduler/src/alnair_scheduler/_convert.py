"""Protobuf ↔ domain: the only module that touches ``*_pb2`` objects.

Inputs are validated here; a value that cannot be read is either an
:class:`InvalidRequestError` kept on the workload (so the reason reaches its owner) or a
:class:`PermanentError` that the durable consumer terminates and reports as an ErrorEvent.
"""

from __future__ import annotations

import json
import uuid

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import (
    allocation_pb2,
    cache_pb2,
    commands_pb2,
    common_pb2,
    inventory_pb2,
    metrics_pb2,
    scheduling_pb2,
    workload_pb2,
)
from alnair_common import PermanentError
from alnair_common.annotations import PREFIX as ANNOTATION_PREFIX
from alnair_common.dataset_refs import DatasetRefError, pod_datasets

from ._datasets import CachePhase, DatasetLocation
from ._domain import (
    POD_GROUP_LABEL,
    PROFILE_ANNOTATION,
    Adapter,
    Assignment,
    Card,
    Failure,
    Gang,
    Phase,
    Share,
    Workload,
    WorkloadId,
    validate_request,
)
from ._errors import InvalidRequestError
from ._utilisation import CardSample

_PHASES = {
    workload_pb2.WORKLOAD_PHASE_PENDING: Phase.PENDING,
    workload_pb2.WORKLOAD_PHASE_BOUND: Phase.BOUND,
    workload_pb2.WORKLOAD_PHASE_RUNNING: Phase.RUNNING,
    workload_pb2.WORKLOAD_PHASE_SUCCEEDED: Phase.FINISHED,
    workload_pb2.WORKLOAD_PHASE_FAILED: Phase.FINISHED,
    workload_pb2.WORKLOAD_PHASE_DELETED: Phase.FINISHED,
}
GIB = 1024**3
_ADAPTER_OF_MODE: dict[int, Adapter] = {common_pb2.MODE_KUBERNETES: Adapter.KUBE_BRIDGE,
                    common_pb2.MODE_LOCAL: Adapter.LOCAL_AGENT}


def _ts(ts: Timestamp) -> float:
    return ts.seconds + ts.nanos / 1e9


def _stamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def workload_id(ref: common_pb2.WorkloadRef) -> WorkloadId:
    return WorkloadId(ref.uid, ref.name, ref.namespace, ref.mode)


def workload_ref(w: WorkloadId) -> common_pb2.WorkloadRef:
    return common_pb2.WorkloadRef(uid=w.uid, name=w.name, namespace=w.namespace, mode=w.mode)


def adapter_of_mode(mode: int) -> Adapter | None:
    """The adapter that reports a workload of ``mode``; None when the mode is unspecified."""
    return _ADAPTER_OF_MODE.get(mode)


def workload_from_event(event: workload_pb2.WorkloadEvent) -> Workload:
    w = event.workload
    if not w.ref.uid:
        raise PermanentError(f"workload event from {event.source or '?'} for {w.ref.namespace}/"
                             f"{w.ref.name} has no ref.uid; adapters must send the pod UID")
    phase = _PHASES.get(w.phase)
    if phase is None:
        raise PermanentError(f"workload {w.ref.uid} has phase {w.phase}, which is not a known "
                             "WorkloadPhase (1..6)")
    invalid = None
    request = None
    if w.HasField("request"):
        try:
            request = validate_request(w.request.memory_gib, w.request.compute_percent)
        except InvalidRequestError as e:
            invalid = e
    else:
        invalid = InvalidRequestError(
            "no-request", "the workload names alnair-scheduler but asks for no alnair/vgpu-memory; "
            "set the resource limits alnair/vgpu-memory (GiB) and alnair/vgpu-compute (%)")
    group = w.labels.get(POD_GROUP_LABEL) or w.annotations.get(POD_GROUP_LABEL) or None
    datasets, dataset_error = workload_datasets(w)
    return Workload(
        ref=workload_id(w.ref), request=request, phase=phase, scheduler_name=w.scheduler_name,
        sequence=event.sequence, created_at=_ts(w.created_at) if w.HasField("created_at") else 0.0,
        profile=w.annotations.get(PROFILE_ANNOTATION), pod_group=group, node=w.node,
        invalid=invalid, source=event.source, datasets=datasets, dataset_error=dataset_error,
    )


def workload_datasets(w: workload_pb2.Workload) -> tuple[tuple[str, ...], str]:
    """(cache keys of the data sets ``w`` reads, why they cannot be read or "").

    Only ``ai.centaurus.io/`` annotations reach the bus; the seed's ``cacheDataset`` form is
    translated into ``ai.centaurus.io/dataset`` by the admission webhook. A pod's data sets
    live in its namespace (key ``namespace.name``); a local workload's are the machine's
    (key ``name``). A malformed annotation does not stop the placement, it only gives no
    preference.
    """
    ours = {k: v for k, v in w.annotations.items() if k.startswith(ANNOTATION_PREFIX)}
    try:
        refs = pod_datasets(ours)
    except DatasetRefError as e:
        return (), str(e)
    local = w.ref.mode == common_pb2.MODE_LOCAL or not w.ref.namespace
    return tuple(r.name if local else f"{w.ref.namespace}.{r.name}" for r in refs), ""


_CACHE_PHASES = {
    cache_pb2.CACHE_PHASE_PENDING: CachePhase.PENDING,
    cache_pb2.CACHE_PHASE_HYDRATING: CachePhase.HYDRATING,
    cache_pb2.CACHE_PHASE_READY: CachePhase.READY,
    cache_pb2.CACHE_PHASE_FAILED: CachePhase.FAILED,
    cache_pb2.CACHE_PHASE_REMOVED: CachePhase.REMOVED,
    cache_pb2.CACHE_PHASE_EVICTED: CachePhase.EVICTED,
}


def dataset_location(s: cache_pb2.CacheDatasetStatus) -> DatasetLocation:
    """Where a data set is hot, from the hydrator's status (its bucket key is the same)."""
    if not s.dataset:
        raise PermanentError("CacheDatasetStatus without a dataset name")
    key = f"{s.namespace}.{s.dataset}" if s.namespace else s.dataset
    return DatasetLocation(key, _CACHE_PHASES.get(s.phase, CachePhase.UNKNOWN),
                           min(max(s.progress, 0.0), 1.0), tuple(n for n in s.nodes if n))


def cards_from_inventory(inv: inventory_pb2.NodeInventory) -> list[Card]:
    if not inv.node:
        raise PermanentError("NodeInventory without a node name; the publisher must set .node")
    cards = []
    for g in inv.gpus:
        if not g.uuid:
            raise PermanentError(f"node {inv.node}: GPU index {g.index} has no uuid")
        memory = g.vgpu_memory_gib or g.memory_bytes // GIB
        compute = g.vgpu_compute_percent or 100
        healthy = g.health != inventory_pb2.GPU_HEALTH_UNHEALTHY and memory > 0
        cards.append(Card(inv.node, g.uuid, g.index, int(memory), int(compute), healthy,
                          g.health_reason if not healthy else "", mps=g.sharing == inventory_pb2.GPU_SHARING_MPS))
    return cards


def inventory_time(inv: inventory_pb2.NodeInventory) -> float:
    return _ts(inv.observed_at) if inv.HasField("observed_at") else 0.0


def samples_from_batch(batch: metrics_pb2.NodeSampleBatch, at: float) -> list[CardSample]:
    return [CardSample(g.gpu_uuid, at, min(max(g.utilization_ratio, 0.0), 1.0),
                       g.memory_used_bytes, g.memory_total_bytes)
            for g in batch.gpus if g.gpu_uuid]


def gang_from_proto(pg: commands_pb2.PodGroup, now: float) -> Gang:
    if not pg.ref.name or not pg.ref.namespace:
        raise PermanentError("PodGroup event without ref.namespace/ref.name")
    if pg.min_member < 1:
        raise PermanentError(f"PodGroup {pg.ref.namespace}/{pg.ref.name} has minMember "
                             f"{pg.min_member}; it must be at least 1")
    return Gang(namespace=pg.ref.namespace, name=pg.ref.name, uid=pg.ref.uid,
                api_version=pg.ref.api_version or "alnair.centaurus.io/v1alpha1",
                kind=pg.ref.kind or "PodGroup", min_member=pg.min_member,
                timeout_seconds=pg.schedule_timeout_seconds,
                created_at=_ts(pg.created_at) if pg.HasField("created_at") else now,
                phase=pg.phase or "Pending", deleted=pg.deleted,
                # A group whose status already says Failed (seen again after a restart)
                # stays failed: its members were told so and must not be bound now.
                failed_reason="PodGroup status is Failed" if pg.phase == "Failed" else "")


# -- allocations (KV value) -------------------------------------------------------------------

def shares_from_allocation(a: allocation_pb2.CardAllocation) -> tuple[Card, list[Share]]:
    card = Card(a.node, a.gpu_uuid, a.gpu_index, a.capacity_memory_gib, a.capacity_compute_percent)
    shares = [Share(workload_id(s.workload), s.memory_gib, s.compute_percent, s.pod_group,
                    s.profile, _ts(s.committed_at), s.scheduler) for s in a.shares]
    return card, shares


def share_proto(s: Share) -> allocation_pb2.GpuShare:
    return allocation_pb2.GpuShare(
        workload=workload_ref(s.workload), memory_gib=s.memory_gib,
        compute_percent=s.compute_percent, pod_group=s.pod_group, profile=s.profile,
        committed_at=_stamp(s.committed_at), scheduler=s.scheduler)


# -- outputs ----------------------------------------------------------------------------------

def assignment_proto(a: Assignment) -> common_pb2.GpuAssignment:
    return common_pb2.GpuAssignment(
        node=a.node, gpu_uuid=a.gpu_uuid, gpu_index=a.gpu_index, memory_gib=a.memory_gib,
        compute_percent=a.compute_percent, filtered_at=_stamp(a.filtered_at),
        profile=a.profile.value)


def bind_decision(w: WorkloadId, a: Assignment, pod_group: str, scheduler: str,
                  now: float) -> scheduling_pb2.BindDecision:
    return scheduling_pb2.BindDecision(workload=workload_ref(w), assignment=assignment_proto(a),
                                       pod_group=pod_group, decided_at=_stamp(now),
                                       scheduler=scheduler, reason=a.reason)


def scheduling_failure(f: Failure, now: float) -> scheduling_pb2.SchedulingFailure:
    return scheduling_pb2.SchedulingFailure(
        workload=workload_ref(f.workload), reason=f.reason, permanent=f.permanent,
        code=f.code, observed_at=_stamp(now),
        rejections=[scheduling_pb2.NodeRejection(node=r.node, code=r.code, message=r.message)
                    for r in f.rejections])


def _object_of(w: WorkloadId) -> commands_pb2.ObjectRef:
    if w.mode == common_pb2.MODE_LOCAL:
        return commands_pb2.ObjectRef(api_version="alnair.local/v1", kind="Workload",
                                      namespace=w.namespace, name=w.name, uid=w.uid)
    return commands_pb2.ObjectRef(api_version="v1", kind="Pod", namespace=w.namespace,
                                  name=w.name, uid=w.uid)


def failed_event(f: Failure, now: float) -> commands_pb2.RecordEventCommand:
    return commands_pb2.RecordEventCommand(
        command_id=uuid.uuid4().hex, object=_object_of(f.workload), type="Warning",
        reason="FailedScheduling", message=f"[{f.code}] {f.reason}", observed_at=_stamp(now))


def gang_status(g: Gang, scheduled: int, message: str) -> commands_pb2.StatusUpdateCommand:
    return commands_pb2.StatusUpdateCommand(
        command_id=uuid.uuid4().hex,
        object=commands_pb2.ObjectRef(api_version=g.api_version, kind=g.kind,
                                      namespace=g.namespace, name=g.name, uid=g.uid),
        status_json=json.dumps({"phase": g.phase, "scheduled": scheduled, "message": message}))


def bind_result(r: scheduling_pb2.BindResult) -> tuple[WorkloadId, bool, str, str,
                                                        tuple[str, int, int]]:
    """(workload, ok, reason, gpu uuid, (node, GiB, %)) of an adapter's answer: the
    assignment it answers about, as the decision it carried out (or refused) named it."""
    a = r.assignment
    return (workload_id(r.workload), r.ok, r.reason, a.gpu_uuid,
            (a.node, a.memory_gib, a.compute_percent))
