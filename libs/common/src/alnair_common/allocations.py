"""The ``gpu_allocations`` bucket from the side of those who act on bind decisions.

The scheduler commits a workload's share of a card in this bucket, by compare-and-set,
*before* it publishes the decision on ``alnair.sched.bind``. An adapter that carries a
decision out (the local agent starts the process, kube-bridge binds the pod, the device
plugin hands the card to the container) therefore checks it against the bucket first: the
share it names must be committed there for the same workload, node, card, memory and
compute, and the card's committed total must fit its capacity. The NATS server already lets
only the scheduler publish decisions and write the bucket; this check is for what the server
cannot know (a decision replayed out of context, a reader of the stream acting on another
reader's consumer, a scheduler bug). A refusal is a :class:`UncommittedShareError` with a
``reason`` from :data:`REASONS`, for a bounded metric label.

The key of a card is defined here once, for the writer (``alnair_scheduler``'s store) and the
readers, so the two cannot drift. The value is :class:`alnair.v1.allocation_pb2.CardAllocation`.
"""

from __future__ import annotations

import re
import weakref

from alnair.v1 import allocation_pb2, common_pb2

from . import subjects
from .bus import Bus, TypedKV
from .errors import PermanentError

BUCKET = subjects.GPU_ALLOCATIONS_BUCKET
NOT_COMMITTED = "not-committed"
WRONG_NODE = "wrong-node"
WRONG_SHARE = "wrong-share"
OVER_CAPACITY = "over-capacity"
REASONS = (NOT_COMMITTED, WRONG_NODE, WRONG_SHARE, OVER_CAPACITY)
_BAD_KEY_CHARS = re.compile(r"[^-_=A-Za-z0-9]")


def card_key(gpu_uuid: str) -> str:
    """The bucket key of a card: KV keys allow fewer characters than GPU UUIDs may hold
    (the value keeps the real UUID)."""
    return _BAD_KEY_CHARS.sub("_", gpu_uuid)


class UncommittedShareError(PermanentError):
    """A bind decision whose share the bucket does not hold as decided; ``reason`` is one
    of :data:`REASONS`. Permanent: the scheduler commits before it decides, so waiting
    cannot make an uncommitted decision committed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def committed_share(allocation: allocation_pb2.CardAllocation | None,
                    workload: common_pb2.WorkloadRef, assignment: common_pb2.GpuAssignment, *,
                    card_memory_gib: int | None = None,
                    card_compute_percent: int | None = None) -> allocation_pb2.GpuShare:
    """The committed share of ``workload`` that ``assignment`` names, or why there is none.

    ``allocation`` is the bucket's value for the assignment's card (None: no key).
    ``card_memory_gib``/``card_compute_percent`` are the card's capacity as the caller
    knows it (its own inventory); the committed total must fit that as well as the capacity
    the scheduler recorded. Raises :class:`UncommittedShareError`.
    """
    what = (f"bind decision for {workload.namespace}/{workload.name} ({workload.uid}): "
            f"{assignment.memory_gib} GiB and {assignment.compute_percent} % of "
            f"{assignment.gpu_uuid} on {assignment.node}")
    if allocation is None or allocation.gpu_uuid != assignment.gpu_uuid:
        raise UncommittedShareError(NOT_COMMITTED, f"{what}: no share of that card is committed "
                                    f"in {BUCKET}; the scheduler commits before it decides")
    share = next((s for s in allocation.shares if s.workload.uid == workload.uid), None)
    if share is None:
        holders = ", ".join(s.workload.uid for s in allocation.shares) or "none"
        raise UncommittedShareError(NOT_COMMITTED, f"{what}: {BUCKET} holds no share of "
                                    f"{workload.uid} on that card (its holders: {holders})")
    if allocation.node != assignment.node:
        raise UncommittedShareError(WRONG_NODE, f"{what}: the card is committed on node "
                                    f"{allocation.node!r}, not {assignment.node!r}")
    if (share.memory_gib, share.compute_percent) != (assignment.memory_gib,
                                                     assignment.compute_percent):
        raise UncommittedShareError(WRONG_SHARE, f"{what}: the committed share is "
                                    f"{share.memory_gib} GiB and {share.compute_percent} %")
    memory = sum(s.memory_gib for s in allocation.shares)
    compute = sum(s.compute_percent for s in allocation.shares)
    memory_cap = min(c for c in (allocation.capacity_memory_gib, card_memory_gib) if c is not None)
    compute_cap = min(c for c in (allocation.capacity_compute_percent, card_compute_percent)
                      if c is not None)
    if memory > memory_cap or compute > compute_cap:
        raise UncommittedShareError(OVER_CAPACITY, f"{what}: the card's committed shares add up "
                                    f"to {memory} GiB and {compute} %, over its capacity of "
                                    f"{memory_cap} GiB and {compute_cap} %")
    return share


class CommittedShares:
    """A reader of the bucket that checks bind decisions (see :func:`committed_share`)."""

    def __init__(self, kv: TypedKV[allocation_pb2.CardAllocation]) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, bus: Bus) -> CommittedShares:
        return cls(await TypedKV.open(bus, BUCKET, allocation_pb2.CardAllocation))

    async def check(self, workload: common_pb2.WorkloadRef, assignment: common_pb2.GpuAssignment,
                    *, card_memory_gib: int | None = None,
                    card_compute_percent: int | None = None) -> allocation_pb2.GpuShare:
        """The committed share the decision names; raises :class:`UncommittedShareError`."""
        entry = await self.kv.get(card_key(assignment.gpu_uuid))
        return committed_share(entry.value if entry else None, workload, assignment,
                               card_memory_gib=card_memory_gib,
                               card_compute_percent=card_compute_percent)


_readers: weakref.WeakKeyDictionary[Bus, CommittedShares] = weakref.WeakKeyDictionary()


async def committed_shares(bus: Bus) -> CommittedShares:
    """The bucket's reader on ``bus``, opened on first use (one per connection)."""
    reader = _readers.get(bus)
    if reader is None:
        reader = _readers[bus] = await CommittedShares.open(bus)
    return reader
