"""A pod as Alnair sees it: the Workload message built from the pod's JSON.

Only this module knows the pod's shape. A bad GPU-assignment annotation or a resource
quantity that is not a whole number does not stop the event: the workload is published
with what could be read and the problem in ``message`` (and logged), because dropping the
event would leave every brain with a wrong picture of the cluster.

The workload carries the pod's ``ai.centaurus.io/`` annotations, with one addition: a pod
in the seed's form (``cacheDataset: "yes"`` over hostPath volumes) names its data sets in
its volumes, not in an annotation, so its ``ai.centaurus.io/dataset`` is relayed as every
data set it reads — those the annotation names and one per hostPath volume, named from the
path as kube-bridge asks the hydrator for them (``alnair_common.dataset_refs``). Readers of
the workload states (the cache hydrator's eviction) then see both forms alike.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from google.protobuf import json_format

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common.annotations import DATASET, GPU_ASSIGNMENT, SEED_CACHE_DATASET
from alnair_common.annotations import PREFIX as ANNOTATION_PREFIX
from alnair_common.dataset_refs import DatasetRefError, pod_datasets, pod_host_paths
from alnair_lifecycle import JOB_LABEL

VGPU_MEMORY = "alnair/vgpu-memory"
VGPU_COMPUTE = "alnair/vgpu-compute"
Obj = dict[str, Any]


def is_alnair_pod(pod: Obj, scheduler_name: str) -> bool:
    """Pods that name Alnair's scheduler, request an ``alnair/*`` resource, or are a training
    job's workers (those on whole cards are placed by the default scheduler)."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") == scheduler_name:
        return True
    if JOB_LABEL in ((pod.get("metadata") or {}).get("labels") or {}):
        return True
    for container in _containers(spec):
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            if any(k in (resources.get(section) or {}) for k in (VGPU_MEMORY, VGPU_COMPUTE)):
                return True
    return False


def pod_workload(pod: Obj, *, deleted: bool = False) -> wl.Workload:
    """The Workload message of ``pod``; ``deleted`` for a pod the API no longer has."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    problems: list[str] = []
    workload = wl.Workload(
        ref=common_pb2.WorkloadRef(uid=meta.get("uid", ""), name=meta.get("name", ""),
                                   namespace=meta.get("namespace", ""),
                                   mode=common_pb2.MODE_KUBERNETES),
        scheduler_name=spec.get("schedulerName", ""),
        node=spec.get("nodeName", ""),
    )
    for owner in meta.get("ownerReferences") or []:
        workload.owners.add(api_version=owner.get("apiVersion", ""), kind=owner.get("kind", ""),
                            name=owner.get("name", ""), uid=owner.get("uid", ""))
    workload.request.memory_gib = _total(spec, VGPU_MEMORY, problems)
    workload.request.compute_percent = _total(spec, VGPU_COMPUTE, problems)
    annotations = meta.get("annotations") or {}
    for key, value in annotations.items():
        if key.startswith(ANNOTATION_PREFIX):
            workload.annotations[key] = value
    read = _datasets_read(annotations, spec)
    if read:
        workload.annotations[DATASET] = read
    workload.labels.update(meta.get("labels") or {})
    if GPU_ASSIGNMENT in annotations:
        try:
            json_format.Parse(annotations[GPU_ASSIGNMENT], workload.assignment)
        except json_format.ParseError as e:
            workload.ClearField("assignment")
            problems.append(f"annotation {GPU_ASSIGNMENT} is not a GpuAssignment JSON: {e}")
    _set_time(workload.created_at, meta.get("creationTimestamp"))
    _set_time(workload.started_at, status.get("startTime"))
    terminated = _terminated(status)
    if terminated:
        _set_time(workload.finished_at, terminated.get("finishedAt"))
        if "exitCode" in terminated:
            workload.exit_code = int(terminated["exitCode"])
    workload.phase = pod_phase(pod, deleted=deleted)
    workload.message = "; ".join([*problems, *_status_message(status)])
    return workload


def pod_phase(pod: Obj, *, deleted: bool = False) -> int:
    """The workload phase of ``pod`` alone (cheap: decides whether an event is news)."""
    if deleted:
        return wl.WORKLOAD_PHASE_DELETED
    phase = (pod.get("status") or {}).get("phase", "")
    if phase == "Succeeded":
        return wl.WORKLOAD_PHASE_SUCCEEDED
    if phase == "Failed":
        return wl.WORKLOAD_PHASE_FAILED
    if phase == "Running":
        return wl.WORKLOAD_PHASE_RUNNING
    node = (pod.get("spec") or {}).get("nodeName", "")
    return wl.WORKLOAD_PHASE_BOUND if node else wl.WORKLOAD_PHASE_PENDING


def _containers(spec: Obj) -> list[Obj]:
    return list(spec.get("containers") or [])


def _datasets_read(annotations: dict[str, str], spec: Obj) -> str | None:
    """A seed-form pod's data sets by name, with those its annotation names ("a,b"); None
    for another pod, or a seed form that names nothing readable (the pod gets an Event for
    it from ``_dataset_pods``; its own ``ai.centaurus.io/dataset`` is relayed as it is)."""
    if SEED_CACHE_DATASET not in annotations:
        return None
    try:
        refs = pod_datasets(annotations, pod_host_paths(spec))
    except DatasetRefError:
        return None
    return ",".join(ref.name for ref in refs) or None


def _total(spec: Obj, resource: str, problems: list[str]) -> int:
    """Sum of a resource over the containers (requests, else limits), in whole units."""
    total = 0
    for container in _containers(spec):
        resources = container.get("resources") or {}
        raw = (resources.get("requests") or {}).get(resource,
                                                    (resources.get("limits") or {}).get(resource))
        if raw is None:
            continue
        try:
            value = Decimal(str(raw))
        except InvalidOperation:
            problems.append(f"container {container.get('name')!r}: {resource}={raw!r} is not a "
                            "whole number")
            continue
        if value != value.to_integral_value() or value < 0:
            problems.append(f"container {container.get('name')!r}: {resource}={raw!r} is not a "
                            "whole number")
            continue
        total += int(value)
    return total


def _terminated(status: Obj) -> Obj | None:
    for container in status.get("containerStatuses") or []:
        state = (container.get("state") or {}).get("terminated")
        if state:
            return state
    return None


def _status_message(status: Obj) -> list[str]:
    if status.get("message"):
        return [str(status["message"])]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return [str(condition.get("message") or condition.get("reason") or "")]
    return []


def _set_time(field: Any, value: str | None) -> None:
    """RFC 3339 from the API; anything else is left unset rather than failing the event."""
    if not value:
        return
    try:
        field.FromDatetime(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except (ValueError, TypeError, OverflowError):
        return
