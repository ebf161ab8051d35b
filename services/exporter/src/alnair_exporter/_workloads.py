"""Which workloads exist, from ``alnair.workload.events``: names for the labels, and endings.

The exporter measures processes and regions; what it needs from the rest of the platform is
who they belong to (pod name and namespace for the labels) and when a workload ended (its
series then stay for the grace period and disappear). Both adapters — kube-bridge and the
local agent — publish the same WorkloadEvent, so this works unchanged in both modes.

Events are validated on the way in: one without a workload uid cannot be attributed to
anything and is rejected with :class:`InvalidWorkloadEvent` (the caller counts and logs it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from alnair.v1 import common_pb2, workload_pb2
from alnair_common import PermanentError

FINISHED_PHASES = frozenset({
    workload_pb2.WORKLOAD_PHASE_SUCCEEDED,
    workload_pb2.WORKLOAD_PHASE_FAILED,
    workload_pb2.WORKLOAD_PHASE_DELETED,
})


class InvalidWorkloadEvent(PermanentError):
    """A WorkloadEvent that decoded but says nothing usable (no uid, negative sequence...)."""


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """Identity of a workload as the labels show it."""

    uid: str
    name: str
    namespace: str
    mode: int = common_pb2.MODE_UNSPECIFIED
    gpu_uuid: str = ""  # the card the scheduler assigned, when known

    @classmethod
    def unnamed(cls, uid: str) -> WorkloadInfo:
        """A workload known only by uid (e.g. found through its cgroup before its event)."""
        return cls(uid=uid, name=uid, namespace="")

    def to_proto(self) -> common_pb2.WorkloadRef:
        return common_pb2.WorkloadRef(uid=self.uid, name=self.name, namespace=self.namespace, mode=self.mode)


@dataclass(frozen=True, slots=True)
class WorkloadUpdate:
    info: WorkloadInfo
    sequence: int
    finished: bool
    node: str = ""  # empty while pending

    @classmethod
    def from_proto(cls, event: workload_pb2.WorkloadEvent) -> WorkloadUpdate:
        w = event.workload
        if not w.ref.uid:
            raise InvalidWorkloadEvent(
                f"workload event seq {event.sequence} from {event.source or 'an unknown source'} has no "
                "workload.ref.uid; the adapter must name the workload"
            )
        info = WorkloadInfo(
            uid=w.ref.uid, name=w.ref.name or w.ref.uid, namespace=w.ref.namespace, mode=w.ref.mode,
            gpu_uuid=w.assignment.gpu_uuid,
        )
        return cls(info=info, sequence=event.sequence, finished=w.phase in FINISHED_PHASES, node=w.node)


class WorkloadDirectory:
    """uid → WorkloadInfo and the moment each workload finished. Thread-safe (the sampler
    reads it from a worker thread while bus events update it on the event loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, WorkloadInfo] = {}
        self._by_name: dict[str, str] = {}
        self._sequence: dict[str, int] = {}
        self._finished: dict[str, float] = {}
        self.version = 0  # bumped on every change, so dormant regions of unknown workloads wake

    def apply(self, update: WorkloadUpdate, now: float) -> bool:
        """Record an update; False when it is older than one already applied (a replay)."""
        uid = update.info.uid
        with self._lock:
            if update.sequence and update.sequence < self._sequence.get(uid, 0):
                return False
            self._sequence[uid] = update.sequence
            self._by_uid[uid] = update.info
            self.version += 1
            self._by_name[f"{update.info.namespace}/{update.info.name}"] = uid
            if update.finished:
                self._finished.setdefault(uid, now)
            else:
                self._finished.pop(uid, None)
            return True

    def get(self, uid: str) -> WorkloadInfo | None:
        with self._lock:
            return self._by_uid.get(uid)

    def unfinished(self) -> list[WorkloadInfo]:
        """Every workload no event said finished (the ones whose processes may still run)."""
        with self._lock:
            return [info for uid, info in self._by_uid.items() if uid not in self._finished]

    def finished_at(self, uid: str) -> float | None:
        with self._lock:
            return self._finished.get(uid)

    def resolve(self, *candidates: str) -> WorkloadInfo | None:
        """The workload a region names: by uid, or by ``namespace/name[/container]``."""
        with self._lock:
            for c in candidates:
                if not c:
                    continue
                if c in self._by_uid:
                    return self._by_uid[c]
                parts = c.split("/")
                if len(parts) >= 2 and (uid := self._by_name.get(f"{parts[0]}/{parts[1]}")):
                    return self._by_uid[uid]
        return None

    def sweep(self, now: float, keep_seconds: float) -> int:
        """Forget workloads that finished more than ``keep_seconds`` ago; how many went.

        Bounds the directory on a long-lived node: every pod that ever ran here ends with a
        finished event, and nothing needs its name once its series are gone.
        """
        with self._lock:
            old = [uid for uid, at in self._finished.items() if now - at > keep_seconds]
        for uid in old:
            self.forget(uid)
        return len(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_uid)

    def forget(self, uid: str) -> None:
        """Drop a workload whose series expired, so the directory stays bounded too."""
        with self._lock:
            info = self._by_uid.pop(uid, None)
            self.version += 1
            self._finished.pop(uid, None)
            self._sequence.pop(uid, None)
            if info is not None:
                self._by_name.pop(f"{info.namespace}/{info.name}", None)
