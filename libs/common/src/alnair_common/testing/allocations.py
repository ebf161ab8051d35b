"""Stand-in for the scheduler's side of ``gpu_allocations`` in adapter tests.

An adapter carries out a bind decision only if its share is committed in the bucket (see
:mod:`alnair_common.allocations`); the scheduler commits before it publishes. Tests that play
the scheduler do the same with :func:`publish_decision`, or :func:`commit_share` first.
"""

from __future__ import annotations

from alnair.v1 import allocation_pb2, scheduling_pb2

from .. import subjects
from ..allocations import BUCKET, card_key
from ..bus import Bus, TypedKV
from ..errors import RevisionConflictError


async def commit_share(bus: Bus, decision: scheduling_pb2.BindDecision, *,
                       capacity_memory_gib: int = 80, capacity_compute_percent: int = 100,
                       check_capacity: bool = True) -> allocation_pb2.CardAllocation:
    """Add the share ``decision`` names to its card's value, as the scheduler commits it.

    ``check_capacity=False`` commits it even over the capacity (a test of what adapters do
    with an over-committed card). A share the card already holds for the workload is replaced.
    """
    kv = await TypedKV.open(bus, BUCKET, allocation_pb2.CardAllocation)
    a, key = decision.assignment, card_key(decision.assignment.gpu_uuid)
    for _ in range(20):
        current = await kv.get(key)
        value = allocation_pb2.CardAllocation()
        if current is not None:
            value.CopyFrom(current.value)
        value.node, value.gpu_uuid, value.gpu_index = a.node, a.gpu_uuid, a.gpu_index
        value.capacity_memory_gib = capacity_memory_gib
        value.capacity_compute_percent = capacity_compute_percent
        kept = [s for s in value.shares if s.workload.uid != decision.workload.uid]
        del value.shares[:]
        value.shares.extend(kept)
        share = value.shares.add(memory_gib=a.memory_gib, compute_percent=a.compute_percent,
                                 pod_group=decision.pod_group, profile=a.profile,
                                 scheduler=decision.scheduler)
        share.workload.CopyFrom(decision.workload)
        share.committed_at.GetCurrentTime()
        if check_capacity:
            used_m = sum(s.memory_gib for s in value.shares)
            used_c = sum(s.compute_percent for s in value.shares)
            if used_m > capacity_memory_gib or used_c > capacity_compute_percent:
                raise AssertionError(f"{a.gpu_uuid}: committing {decision.workload.uid} makes "
                                     f"{used_m} GiB/{used_c} %, over {capacity_memory_gib} GiB/"
                                     f"{capacity_compute_percent} %")
        try:
            if current is None:
                await kv.create(key, value)
            else:
                await kv.update(key, value, current.revision)
        except RevisionConflictError:
            continue
        return value
    raise AssertionError(f"{BUCKET}/{key}: lost 20 compare-and-set races")


async def release_share(bus: Bus, gpu_uuid: str, uid: str) -> None:
    """Remove ``uid``'s share of ``gpu_uuid``, as the scheduler does when the workload ends."""
    kv = await TypedKV.open(bus, BUCKET, allocation_pb2.CardAllocation)
    key = card_key(gpu_uuid)
    for _ in range(20):
        current = await kv.get(key)
        if current is None or all(s.workload.uid != uid for s in current.value.shares):
            return
        value = allocation_pb2.CardAllocation()
        value.CopyFrom(current.value)
        del value.shares[:]
        value.shares.extend(s for s in current.value.shares if s.workload.uid != uid)
        try:
            await kv.update(key, value, current.revision)
        except RevisionConflictError:
            continue
        return
    raise AssertionError(f"{BUCKET}/{key}: lost 20 compare-and-set races")


async def publish_decision(bus: Bus, decision: scheduling_pb2.BindDecision, *,
                           msg_id: str | None = None, capacity_memory_gib: int = 80,
                           capacity_compute_percent: int = 100) -> None:
    """Commit the decision's share, then publish the decision: the scheduler's order."""
    await commit_share(bus, decision, capacity_memory_gib=capacity_memory_gib,
                       capacity_compute_percent=capacity_compute_percent)
    await bus.publish(subjects.sched_bind(), decision, msg_id=msg_id)
