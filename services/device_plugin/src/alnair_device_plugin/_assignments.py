"""The scheduler's card choices for this node, and which of them the kubelet has allocated.

Kubelet's ``Allocate`` names devices, not pods. The scheduler has already picked the card and
the amounts and said so on the bus (``alnair.sched.bind``, and the workload's assignment on
``alnair.workload.events``). This index keeps those decisions for this node on local disk —
fed by durable consumers that ack only after the write, so a plugin restart loses none — and
answers "which assignment do these N units of card X belong to?" by amounts and card, never
by timestamps. When the answer is not unique in a way that matters (two pods on the card
with the same memory but different compute), it refuses instead of guessing.

An assignment from the bus is kept only once ``gpu_allocations`` confirms it
(:func:`committed_assignment`): the scheduler commits a share there before it decides, so a
decision or a pod annotation the scheduler did not commit never reaches a container.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from alnair.v1 import common_pb2
from alnair_common import Bus, PermanentError, get_logger
from alnair_common.allocations import UncommittedShareError, committed_shares
from alnair_gpu import NodeGpus

from . import _metrics
from ._errors import NoAssignmentError
from ._units import COMPUTE_UNITS_PER_GPU, Resource

TOMBSTONE_SECONDS = 24 * 3600.0
log = get_logger("alnair.device-plugin")
_SAFE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


@dataclass(frozen=True)
class Assignment:
    """One workload's share of one card on this node, and what the kubelet allocated of it."""

    uid: str
    namespace: str
    name: str
    gpu_uuid: str
    gpu_index: int
    memory_gib: int
    compute_percent: int
    sequence: int = 0
    allocated: dict[str, list[str]] = field(default_factory=dict)  # resource name -> device IDs

    @property
    def workload_id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def amount(self, resource: Resource) -> int:
        return self.memory_gib if resource is Resource.MEMORY else self.compute_percent

    def needs(self, resource: Resource) -> bool:
        return self.amount(resource) > 0 and resource.resource_name not in self.allocated

    @property
    def started(self) -> bool:
        return bool(self.allocated)


def assignment_from_proto(ref: common_pb2.WorkloadRef, gpu: common_pb2.GpuAssignment) -> Assignment:
    """Validate a decision from the bus; a bad one is permanent (terminated, reported)."""
    problems = []
    if not ref.uid:
        problems.append("workload uid is empty")
    if not gpu.gpu_uuid:
        problems.append("gpu_uuid is empty")
    if gpu.memory_gib == 0 and gpu.compute_percent == 0:
        problems.append("neither memory_gib nor compute_percent is set")
    if gpu.compute_percent > COMPUTE_UNITS_PER_GPU:
        problems.append(f"compute_percent {gpu.compute_percent} % is over 100 % of one GPU")
    if ref.uid and not _SAFE_UID.match(ref.uid):
        problems.append(f"uid {ref.uid!r} is not a UID (letters, digits, '-', '_' only)")
    if problems:
        raise PermanentError(f"assignment of {ref.namespace}/{ref.name} on {gpu.node}: " + "; ".join(problems))
    return Assignment(uid=ref.uid, namespace=ref.namespace or "default", name=ref.name or ref.uid,
                      gpu_uuid=gpu.gpu_uuid, gpu_index=gpu.gpu_index, memory_gib=gpu.memory_gib,
                      compute_percent=gpu.compute_percent)


async def committed_assignment(bus: Bus, ref: common_pb2.WorkloadRef, gpu: common_pb2.GpuAssignment,
                               gpus: NodeGpus | None = None) -> Assignment:
    """:func:`assignment_from_proto`, once ``gpu_allocations`` holds its share as assigned.

    ``gpus`` (this node's cards) adds the card's real memory to the capacity check. A share
    that is not committed, differs, or would take its card over capacity raises
    :class:`alnair_common.allocations.UncommittedShareError` (permanent), counted and logged.
    """
    assignment = assignment_from_proto(ref, gpu)
    card = gpus.by_uuid(gpu.gpu_uuid) if gpus is not None else None
    try:
        await (await committed_shares(bus)).check(
            ref, gpu, card_memory_gib=card.memory_gib if card is not None else None)
    except UncommittedShareError as e:
        _metrics.BINDS_REFUSED.labels(e.reason).inc()
        log.warning("assignment refused", reason=e.reason, workload=assignment.workload_id,
                    uid=assignment.uid, gpu=assignment.gpu_uuid, detail=str(e))
        raise
    return assignment


def _same_share(a: Assignment, b: Assignment) -> bool:
    return (a.gpu_uuid, a.memory_gib, a.compute_percent) == (b.gpu_uuid, b.memory_gib, b.compute_percent)


class AssignmentIndex:
    """This node's assignments as one JSON file each under ``directory``, plus tombstones of
    workloads that ended (so a late bind decision for a finished pod is not kept forever)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._live = self.directory / "assignments"
        self._ended = self.directory / "ended"
        self._live.mkdir(parents=True, exist_ok=True)
        self._ended.mkdir(parents=True, exist_ok=True)
        self._items: dict[str, Assignment] = {}
        self._last_allocated: str | None = None
        for path in sorted(self._live.glob("*.json")):
            item = Assignment(**json.loads(path.read_text()))
            self._items[item.uid] = item
        self._next = max((a.sequence for a in self._items.values()), default=0) + 1
        cutoff = time.time() - TOMBSTONE_SECONDS
        for path in self._ended.iterdir():
            if path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)

    # -- fed by the bus -------------------------------------------------------------------

    def add(self, assignment: Assignment) -> bool:
        """Keep a decision; False when it changes nothing: a redelivery, a workload that ended,
        or a new decision for a workload the kubelet has already started allocating (the
        container holds its units; a later decision cannot move it)."""
        known = self._items.get(assignment.uid)
        if (self._ended / assignment.uid).exists() or (known is not None and (
                known.started or _same_share(known, assignment))):
            return False
        item = replace(assignment, sequence=self._next, allocated={})
        self._next += 1
        self._write(item)
        return True

    def end(self, uid: str) -> Assignment | None:
        """The workload finished or was deleted: forget it; returns what was held."""
        (self._ended / uid).touch()
        item = self._items.pop(uid, None)
        (self._live / f"{uid}.json").unlink(missing_ok=True)
        return item

    # -- used by Allocate -----------------------------------------------------------------

    def get(self, uid: str) -> Assignment | None:
        return self._items.get(uid)

    def all(self) -> list[Assignment]:
        return sorted(self._items.values(), key=lambda a: a.sequence)

    def held_units(self, resource: Resource) -> dict[str, Assignment]:
        """Device ID → the assignment it was allocated to."""
        return {d: a for a in self._items.values() for d in a.allocated.get(resource.resource_name, [])}

    def match(self, resource: Resource, gpu_uuid: str, count: int) -> Assignment:
        """The assignment ``count`` units of ``resource`` on ``gpu_uuid`` are for.

        The kubelet allocates all resources of one container before the next container, so the
        assignment whose other resource was allocated last comes first; otherwise one not yet
        allocated, with these amounts. Several candidates are fine when their limits are identical
        (the oldest decision is used); differing limits cannot be told apart and are refused.
        """
        waiting = [a for a in self.all() if a.gpu_uuid == gpu_uuid and a.needs(resource)]
        fits = [a for a in waiting if a.amount(resource) == count]
        candidates = self.same_container_first(fits)
        if not candidates:
            seen = ", ".join(f"{a.workload_id} wants {a.amount(resource)} {resource.unit}" for a in waiting)
            raise NoAssignmentError(
                f"{resource.resource_name}: {count} {resource.unit} requested on {gpu_uuid}, but no scheduler "
                f"assignment on the bus matches ({seen or 'none waiting on this card'}); was the pod scheduled "
                "by alnair-scheduler and is the bind decision published?")
        limits = {(a.memory_gib, a.compute_percent) for a in candidates}
        if len(limits) > 1:
            names = ", ".join(f"{a.workload_id} ({a.memory_gib} GiB, {a.compute_percent} %)" for a in candidates)
            raise NoAssignmentError(
                f"{resource.resource_name}: {count} {resource.unit} on {gpu_uuid} match {len(candidates)} "
                f"assignments with different limits: {names}; refusing to guess which pod this is")
        return candidates[0]

    def same_container_first(self, fits: list[Assignment]) -> list[Assignment]:
        """The assignment allocated last (its container's other resource comes right after),
        else those not allocated at all; one half-allocated long ago is a last resort."""
        last = [a for a in fits if a.uid == self._last_allocated]
        return last or [a for a in fits if not a.started] or fits

    def record_allocation(self, uid: str, resource: Resource, device_ids: list[str]) -> Assignment:
        self._last_allocated = uid if device_ids else None
        item = self._items[uid]
        updated = replace(item, allocated={**item.allocated, resource.resource_name: list(device_ids)})
        self._write(updated)
        return updated

    def restore(self, item: Assignment) -> None:
        """Put back an earlier state of an assignment (a multi-container Allocate failed)."""
        self._last_allocated = None
        if item.uid in self._items:
            self._write(item)

    def _write(self, item: Assignment) -> None:
        path = self._live / f"{item.uid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(item)))
        os.replace(tmp, path)
        self._items[item.uid] = item
