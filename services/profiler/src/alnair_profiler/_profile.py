"""A finished workload's profile and its owner's aggregate, as records, messages and annotations.

The MongoDB record is keyed by the workload uid (``_id``), so writing it is an upsert that a
replay repeats harmlessly. The owner record (Job, PodGroup, training job) is recomputed from
its workloads' records every time one of them finishes — a pure function of what is stored,
hence idempotent too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import commands_pb2, common_pb2, profile_pb2, workload_pb2
from alnair_common.annotations import OWNER_KINDS
from alnair_common.annotations import PREFIX as ANNOTATION_PREFIX

from ._detection import TrainingDetection
from ._domain import Owner, WorkloadInfo
from ._series import SeriesSummary

SERIES = ("cpu_cores", "memory_bytes", "disk_io_bytes_per_second", "network_bytes_per_second",
          "gpu_utilization_ratio", "gpu_memory_bytes", "memcpy_bytes_per_second",
          "memcpy_htod_bytes_per_second", "memcpy_dtoh_bytes_per_second", "memcpy_dtod_bytes_per_second")
# Every series is in the record, the annotations and the WorkloadProfile message (copy
# bytes by direction and their sum alike); a series the message lacks would be left out.
_PROTO_SERIES = frozenset(profile_pb2.WorkloadProfile.DESCRIPTOR.fields_by_name)
SCHEMA_VERSION = 1
ALNAIR_GROUP = "alnair.centaurus.io"


@dataclass(frozen=True)
class WorkloadProfile:
    info: WorkloadInfo
    summaries: Mapping[str, SeriesSummary]
    training: TrainingDetection = field(default_factory=TrainingDetection)
    predicted_peak_gpu_memory_bytes: int = 0

    @property
    def uid(self) -> str:
        return self.info.uid

    def with_maxima(self, maxima: Mapping[str, float]) -> WorkloadProfile:
        """This profile with maxima raised where Prometheus saw higher values."""
        merged = {k: s.merged_max(maxima.get(k)) for k, s in self.summaries.items()}
        return WorkloadProfile(self.info, merged, self.training, self.predicted_peak_gpu_memory_bytes)

    def with_series(self, replacements: Mapping[str, SeriesSummary]) -> WorkloadProfile:
        """Backfill: a summary built from more samples (Prometheus) replaces a thinner one."""
        merged = dict(self.summaries)
        for k, s in replacements.items():
            mine = merged.get(k, SeriesSummary())
            if s.samples > mine.samples:
                merged[k] = SeriesSummary(max(s.max, mine.max), s.deciles, s.samples)
        return WorkloadProfile(self.info, merged, self.training, self.predicted_peak_gpu_memory_bytes)

    def to_doc(self) -> dict[str, object]:
        return {
            "_id": self.uid, "schema": SCHEMA_VERSION, **self.info.to_doc(),
            "series": {k: self.summaries.get(k, SeriesSummary()).to_doc() for k in SERIES},
            "training": self.training.to_doc(),
            "predicted_peak_gpu_memory_bytes": self.predicted_peak_gpu_memory_bytes,
        }

    @classmethod
    def from_doc(cls, d: dict) -> WorkloadProfile:  # type: ignore[type-arg]
        return cls(WorkloadInfo.from_doc(d),
                   {k: SeriesSummary.from_doc(v) for k, v in (d.get("series") or {}).items()},
                   TrainingDetection.from_doc(d.get("training")),
                   int(d.get("predicted_peak_gpu_memory_bytes", 0)))

    def to_proto(self) -> profile_pb2.WorkloadProfile:
        i = self.info
        msg = profile_pb2.WorkloadProfile(
            workload=common_pb2.WorkloadRef(uid=i.uid, name=i.name, namespace=i.namespace,
                                            mode=common_pb2.Mode.Value(f"MODE_{i.mode or 'UNSPECIFIED'}")),
            owners=[common_pb2.OwnerRef(api_version=o.api_version, kind=o.kind, name=o.name, uid=o.uid)
                    for o in i.owners],
            node=i.node,
            assignment=common_pb2.GpuAssignment(node=i.node, gpu_uuid=i.gpu_uuid, gpu_index=i.gpu_index,
                                                memory_gib=i.limit_memory_gib,
                                                compute_percent=i.limit_compute_percent),
            request=common_pb2.GpuRequest(memory_gib=i.request_memory_gib,
                                          compute_percent=i.request_compute_percent),
            phase=workload_pb2.WorkloadPhase.Value(f"WORKLOAD_PHASE_{i.phase}"),
            training=profile_pb2.TrainingDetection(
                is_training=self.training.is_training, period_seconds=self.training.period_seconds,
                confidence=self.training.confidence, evidence=self.training.evidence),
            predicted_peak_gpu_memory_bytes=self.predicted_peak_gpu_memory_bytes,
        )
        if i.usage is not None:
            msg.usage.CopyFrom(i.usage.to_proto())
        for name, when in (("started_at", i.started_at), ("finished_at", i.finished_at)):
            if when is not None:
                getattr(msg, name).CopyFrom(_timestamp(when))
        for name in (n for n in SERIES if n in _PROTO_SERIES):
            s = self.summaries.get(name, SeriesSummary())
            getattr(msg, name).CopyFrom(profile_pb2.SeriesSummary(max=s.max, deciles=list(s.deciles),
                                                                  samples=s.samples))
        return msg

    def annotations(self) -> dict[str, str]:
        """The utilisation summary patched once onto the pod (or local workload)."""
        return {**maxima_annotations({k: s.max for k, s in self.summaries.items()}),
                f"{ANNOTATION_PREFIX}job-type": "training" if self.training.is_training else "other",
                f"{ANNOTATION_PREFIX}iteration-period-seconds": f"{self.training.period_seconds:.6g}",
                f"{ANNOTATION_PREFIX}training-confidence": f"{self.training.confidence:.2f}",
                f"{ANNOTATION_PREFIX}predicted-peak-gpu-memory-bytes": str(self.predicted_peak_gpu_memory_bytes)}

    def object_ref(self) -> commands_pb2.ObjectRef:
        i = self.info
        if i.kubernetes:
            return commands_pb2.ObjectRef(api_version="v1", kind="Pod", namespace=i.namespace,
                                          name=i.name, uid=i.uid)
        return commands_pb2.ObjectRef(api_version="alnair.local/v1", kind="Workload",
                                      namespace=i.namespace, name=i.name, uid=i.uid)


def with_exit_usage(summaries: Mapping[str, SeriesSummary], info: WorkloadInfo) -> dict[str, SeriesSummary]:
    """The host series' maxima raised to what the workload's exit totals prove: a peak
    resident memory is a memory reading the samples may have missed, and a total over the
    run's duration is a mean rate, which the maximum is never below. A workload that ended
    within one sampling period has no host samples; these give its profile host figures."""
    out = dict(summaries)
    u = info.usage
    if u is None:
        return out
    floors = {"memory_bytes": float(u.max_rss_bytes)}
    if info.started_at is not None and info.finished_at is not None:
        seconds = (info.finished_at - info.started_at).total_seconds()
        if seconds > 0:
            floors["cpu_cores"] = u.cpu_seconds / seconds
            floors["disk_io_bytes_per_second"] = (u.disk_read_bytes + u.disk_write_bytes) / seconds
    for name, floor in floors.items():
        out[name] = out.get(name, SeriesSummary()).merged_max(floor)
    return out


def maxima_annotations(maxima: Mapping[str, float]) -> dict[str, str]:
    return {f"{ANNOTATION_PREFIX}max-{k.replace('_', '-')}": f"{maxima.get(k, 0.0):.6g}" for k in SERIES}


@dataclass(frozen=True)
class OwnerProfile:
    """Maxima over every finished workload of one owner."""

    owner: Owner
    namespace: str
    workloads: tuple[str, ...]
    maxima: Mapping[str, float]
    training: bool
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def aggregate(cls, owner: Owner, records: Iterable[dict]) -> OwnerProfile:  # type: ignore[type-arg]
        profiles = [WorkloadProfile.from_doc(r) for r in records]
        profiles.sort(key=lambda p: p.uid)
        maxima = {k: max((p.summaries.get(k, SeriesSummary()).max for p in profiles), default=0.0)
                  for k in SERIES}
        starts = [p.info.started_at for p in profiles if p.info.started_at]
        ends = [p.info.finished_at for p in profiles if p.info.finished_at]
        return cls(owner, profiles[0].info.namespace if profiles else "", tuple(p.uid for p in profiles),
                   maxima, any(p.training.is_training for p in profiles),
                   min(starts) if starts else None, max(ends) if ends else None)

    def to_doc(self) -> dict[str, object]:
        return {"_id": self.owner.uid, **self.owner.to_doc(), "namespace": self.namespace,
                "workloads": list(self.workloads), "workload_count": len(self.workloads),
                "maxima": dict(self.maxima), "training": self.training,
                "started_at": self.started_at, "finished_at": self.finished_at}

    def annotations(self) -> dict[str, str]:
        return {**maxima_annotations(self.maxima),
                f"{ANNOTATION_PREFIX}profiled-workloads": str(len(self.workloads)),
                f"{ANNOTATION_PREFIX}job-type": "training" if self.training else "other"}

    @property
    def annotatable(self) -> bool:
        """Whether kube-bridge writes annotations on this owner's kind (a DaemonSet or an
        operator's custom resource keeps its record in the store only: asking would only
        earn a refusal and an error event per finished pod)."""
        o = self.owner
        return (o.api_version, o.kind) in OWNER_KINDS or o.api_version.startswith(ALNAIR_GROUP + "/")

    def object_ref(self) -> commands_pb2.ObjectRef:
        return commands_pb2.ObjectRef(api_version=self.owner.api_version, kind=self.owner.kind,
                                      namespace=self.namespace, name=self.owner.name, uid=self.owner.uid)


def _timestamp(when: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC))
    return ts
