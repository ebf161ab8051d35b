"""What the profiler reasons about, converted from bus messages and validated on the way in.

Protobuf stays at this edge: :func:`workload_from_event` and :func:`points_from_batch` /
:func:`point_from_cuda` turn messages into small dataclasses. A whole message that cannot be
understood (no uid, no phase) raises :class:`InvalidInputError` — the durable consumer then
terminates it and publishes why. Single impossible *values* inside a sample batch (NaN,
negative, a ratio above 1) are dropped one by one and reported to the caller, so that one
bad reading costs one reading and not a whole batch from a node.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from alnair.v1 import common_pb2, metrics_pb2, workload_pb2
from alnair_common import PermanentError

from ._detection import KernelNameReport
from ._errors import ProfilerError

TERMINAL = frozenset({workload_pb2.WORKLOAD_PHASE_SUCCEEDED, workload_pb2.WORKLOAD_PHASE_FAILED,
                      workload_pb2.WORKLOAD_PHASE_DELETED})
RATIO_SLACK = 1.05  # NVML rounds; a process may read 101 % for one sample


class InvalidInputError(ProfilerError, PermanentError):
    """A bus message the profiler cannot use; the message says what is wrong."""


@dataclass(frozen=True)
class Owner:
    api_version: str
    kind: str
    name: str
    uid: str

    def to_doc(self) -> dict[str, str]:
        return {"api_version": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


@dataclass(frozen=True)
class ExitUsage:
    """What a finished workload's processes used in all (``ResourceUsage``: the local agent's
    reaper counts it with getrusage); exact where the periodic host samples are thin."""

    cpu_user_seconds: float = 0.0
    cpu_system_seconds: float = 0.0
    max_rss_bytes: int = 0
    disk_read_bytes: int = 0
    disk_write_bytes: int = 0

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_user_seconds + self.cpu_system_seconds

    def to_doc(self) -> dict[str, float]:
        return {"cpu_user_seconds": self.cpu_user_seconds, "cpu_system_seconds": self.cpu_system_seconds,
                "max_rss_bytes": self.max_rss_bytes, "disk_read_bytes": self.disk_read_bytes,
                "disk_write_bytes": self.disk_write_bytes}

    @classmethod
    def from_doc(cls, d: dict | None) -> ExitUsage | None:  # type: ignore[type-arg]
        if not d:
            return None
        return cls(float(d.get("cpu_user_seconds", 0.0)), float(d.get("cpu_system_seconds", 0.0)),
                   int(d.get("max_rss_bytes", 0)), int(d.get("disk_read_bytes", 0)),
                   int(d.get("disk_write_bytes", 0)))

    @classmethod
    def from_proto(cls, u: workload_pb2.ResourceUsage) -> ExitUsage | None:
        """None for times that are not finite non-negative numbers: the lifecycle event still
        counts, its totals do not."""
        if not all(math.isfinite(t) and t >= 0 for t in (u.cpu_user_seconds, u.cpu_system_seconds)):
            return None
        return cls(u.cpu_user_seconds, u.cpu_system_seconds, u.max_rss_bytes, u.disk_read_bytes,
                   u.disk_write_bytes)

    def to_proto(self) -> workload_pb2.ResourceUsage:
        return workload_pb2.ResourceUsage(**self.to_doc())


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload's metadata as last seen on ``alnair.workload.events``."""

    uid: str
    name: str
    namespace: str
    mode: str
    owners: tuple[Owner, ...]
    node: str
    phase: str
    sequence: int
    gpu_uuid: str = ""
    gpu_index: int = 0
    limit_memory_gib: int = 0
    limit_compute_percent: int = 0
    request_memory_gib: int = 0
    request_compute_percent: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    usage: ExitUsage | None = None

    @property
    def finished(self) -> bool:
        return self.phase in {"SUCCEEDED", "FAILED", "DELETED"}

    @property
    def kubernetes(self) -> bool:
        return self.mode == "KUBERNETES"

    def to_doc(self) -> dict[str, object]:
        return {
            "uid": self.uid, "name": self.name, "namespace": self.namespace, "mode": self.mode,
            "owners": [o.to_doc() for o in self.owners], "node": self.node, "phase": self.phase,
            "sequence": self.sequence,
            "gpu": {"uuid": self.gpu_uuid, "index": self.gpu_index,
                    "limit_memory_gib": self.limit_memory_gib,
                    "limit_compute_percent": self.limit_compute_percent},
            "request": {"memory_gib": self.request_memory_gib,
                        "compute_percent": self.request_compute_percent},
            "created_at": self.created_at, "started_at": self.started_at,
            "finished_at": self.finished_at, "exit_code": self.exit_code, "labels": dict(self.labels),
            "usage": self.usage.to_doc() if self.usage else None,
        }

    @classmethod
    def from_doc(cls, d: dict) -> WorkloadInfo:  # type: ignore[type-arg]
        gpu, req = d.get("gpu") or {}, d.get("request") or {}
        return cls(
            uid=d["uid"], name=d.get("name", ""), namespace=d.get("namespace", ""),
            mode=d.get("mode", ""), owners=tuple(Owner(**o) for o in d.get("owners", [])),
            node=d.get("node", ""), phase=d.get("phase", ""), sequence=int(d.get("sequence", 0)),
            gpu_uuid=gpu.get("uuid", ""), gpu_index=int(gpu.get("index", 0)),
            limit_memory_gib=int(gpu.get("limit_memory_gib", 0)),
            limit_compute_percent=int(gpu.get("limit_compute_percent", 0)),
            request_memory_gib=int(req.get("memory_gib", 0)),
            request_compute_percent=int(req.get("compute_percent", 0)),
            created_at=_aware(d.get("created_at")), started_at=_aware(d.get("started_at")),
            finished_at=_aware(d.get("finished_at")), exit_code=d.get("exit_code"),
            labels=dict(d.get("labels") or {}), usage=ExitUsage.from_doc(d.get("usage")))


def _aware(value: datetime | None) -> datetime | None:
    """MongoDB hands datetimes back naive (UTC); the profiler compares aware ones."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _time(ts: object, present: bool) -> datetime | None:
    if not present:
        return None
    return ts.ToDatetime(tzinfo=UTC)  # type: ignore[attr-defined]


def workload_from_event(event: workload_pb2.WorkloadEvent) -> WorkloadInfo:
    w = event.workload
    if not w.ref.uid:
        raise InvalidInputError(
            f"workload event for {w.ref.namespace or '?'}/{w.ref.name or '?'} has no uid: "
            "publishers must set workload.ref.uid (the pod UID or the local workload id)")
    if w.phase == workload_pb2.WORKLOAD_PHASE_UNSPECIFIED:
        raise InvalidInputError(f"workload event for uid {w.ref.uid} has no phase: set workload.phase")
    a = w.assignment
    return WorkloadInfo(
        uid=w.ref.uid, name=w.ref.name, namespace=w.ref.namespace,
        mode=common_pb2.Mode.Name(w.ref.mode).removeprefix("MODE_"),
        owners=tuple(Owner(o.api_version, o.kind, o.name, o.uid) for o in w.owners if o.uid),
        node=w.node or a.node, phase=workload_pb2.WorkloadPhase.Name(w.phase).removeprefix("WORKLOAD_PHASE_"),
        sequence=event.sequence, gpu_uuid=a.gpu_uuid, gpu_index=a.gpu_index,
        limit_memory_gib=a.memory_gib, limit_compute_percent=a.compute_percent,
        request_memory_gib=w.request.memory_gib, request_compute_percent=w.request.compute_percent,
        created_at=_time(w.created_at, w.HasField("created_at")),
        started_at=_time(w.started_at, w.HasField("started_at")),
        finished_at=_time(w.finished_at, w.HasField("finished_at"))
        or (_time(event.observed_at, event.HasField("observed_at")) if w.phase in TERMINAL else None),
        exit_code=w.exit_code if w.HasField("exit_code") else None, labels=dict(w.labels),
        usage=ExitUsage.from_proto(w.usage) if w.HasField("usage") else None)


@dataclass(frozen=True)
class Point:
    """One reading of one metric of one workload. ``metric`` names a profile series."""

    uid: str
    metric: str
    t: float
    value: float


@dataclass(frozen=True)
class Rejected:
    uid: str
    metric: str
    value: float
    why: str


@dataclass(frozen=True)
class LaunchPoint:
    uid: str
    t: float
    period_seconds: float
    repeats: int


COPY_DIRECTIONS = ("htod", "dtoh", "dtod")  # host→device, device→host, device→device


@dataclass(frozen=True)
class CopyCounter:
    """Cumulative copy bytes of a workload by direction (``COPY_DIRECTIONS``); the profiler
    turns each into a rate. Directions are kept apart because they are different limits: H2D
    is the PCIe/input pipeline, D2D is on-card bandwidth."""

    uid: str
    t: float
    htod_bytes: int
    dtoh_bytes: int = 0
    dtod_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.htod_bytes + self.dtoh_bytes + self.dtod_bytes

    def by_direction(self) -> dict[str, int]:
        return {"htod": self.htod_bytes, "dtoh": self.dtoh_bytes, "dtod": self.dtod_bytes}


def _check(uid: str, metric: str, value: float, *, ratio: bool = False) -> Point | Rejected | None:
    if math.isnan(value) or math.isinf(value):
        return Rejected(uid, metric, value, "not a number")
    if value < 0:
        return Rejected(uid, metric, value, "negative")
    if ratio and value > RATIO_SLACK:
        return Rejected(uid, metric, value, f"ratio above {RATIO_SLACK}")
    return None


def points_from_batch(batch: metrics_pb2.NodeSampleBatch) -> Iterator[Point | Rejected]:
    """Per-workload readings of one exporter batch; per-process values summed per workload."""
    t = batch.sampled_at.ToDatetime(tzinfo=UTC).timestamp()
    sums: dict[tuple[str, str], float] = {}
    for p in batch.processes:
        uid = p.workload.uid
        if not uid:
            continue  # a process no workload owns; not ours to profile
        for metric, value, ratio in (("gpu_utilization_ratio", p.sm_utilization_ratio, True),
                                     ("gpu_memory_bytes", float(p.memory_used_bytes), False),
                                     ("gpu_memory_bandwidth_ratio", p.memory_bandwidth_ratio, True)):
            bad = _check(uid, metric, value, ratio=ratio)
            if bad is not None:
                yield bad  # type: ignore[misc]
                continue
            sums[(uid, metric)] = sums.get((uid, metric), 0.0) + value
    for (uid, metric), value in sums.items():
        yield Point(uid, metric, t, min(value, 1.0) if metric.endswith("_ratio") else value)
    for h in batch.hosts:
        uid = h.workload.uid
        if not uid:
            continue
        readings = (("cpu_cores", h.cpu_cores),
                    ("memory_bytes", float(h.memory_bytes)),
                    ("disk_io_bytes_per_second", h.disk_read_bytes_per_second + h.disk_write_bytes_per_second),
                    ("network_bytes_per_second",
                     h.network_receive_bytes_per_second + h.network_transmit_bytes_per_second))
        for metric, value in readings:
            bad = _check(uid, metric, value)
            yield bad if bad is not None else Point(uid, metric, t, value)  # type: ignore[misc]


def point_from_cuda(
    sample: metrics_pb2.CudaSample,
) -> Iterator[Point | Rejected | LaunchPoint | CopyCounter | KernelNameReport]:
    uid = sample.workload.uid
    if not uid:
        return
    t = sample.sampled_at.ToDatetime(tzinfo=UTC).timestamp()
    yield Point(uid, "gpu_memory_bytes_cuda", t, float(sample.memory_used_bytes))
    yield CopyCounter(uid, t, sample.memcpy_htod_bytes_total, sample.memcpy_dtoh_bytes_total,
                      sample.memcpy_dtod_bytes_total)
    period = sample.launch_period_seconds
    bad = _check(uid, "launch_period_seconds", period)
    if bad is not None:
        yield bad
    elif period > 0:
        yield LaunchPoint(uid, t, period, sample.launch_period_repeats)
    if sample.kernel_names_read:  # without names the counts mean nothing
        yield KernelNameReport(uid, t, sample.gpu_uuid, sample.kernel_launches_total,
                               sample.training_kernel_launches_total, True, sample.torch_kernels_seen)
