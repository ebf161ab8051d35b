"""Restarts and concurrent writers: the model comes back from KV + events, never double-allocates."""

from __future__ import annotations

import asyncio

from sched_harness import Adapter, Observer, assert_within_capacity, committed, start_scheduler, stop_scheduler

from alnair_common import Bus
from alnair_common.natsd import NatsServer


async def test_restarted_scheduler_rebuilds_and_does_not_double_allocate(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    first = [await adapter.pending(f"first-{i}", 30, 40) for i in range(2)]
    decisions = await seen.bound(*first)
    await adapter.bound(first[0], decisions[0])  # the adapter carried out one of the two
    await stop_scheduler(service, task)

    # While the scheduler is away: one workload finishes, two more arrive.
    await adapter.finish(first[0])
    later = [await adapter.pending(f"later-{i}", 30, 40) for i in range(2)]
    service, task = await start_scheduler(nats_server.url)
    try:
        (placed,) = await seen.bound(later[0])
        failure, code = await seen.failed(later[1], "insufficient-memory")
        assert "gpu0 20 GiB/20 %" in failure.reason
        # The unbound decision of first-1 was re-announced unchanged, not placed again.
        assert seen.binds[first[1].uid].assignment.gpu_uuid == decisions[1].assignment.gpu_uuid
        cards = await assert_within_capacity(bus)
        holders = {s.workload.uid for c in cards.values() for s in c.shares}
        assert holders == {first[1].uid, later[0].uid}
        assert service.engine.cluster.placement_of(first[0].uid) is None
    finally:
        await stop_scheduler(service, task)


async def test_two_schedulers_racing_for_the_same_cards_never_overcommit(
    nats_server: NatsServer, bus: Bus,
) -> None:
    """Two instances (two schedulerNames) share the cards; CAS makes the loser re-check."""
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("n1", "n2"):
        await adapter.inventory(node, 2, 80)
    a = await start_scheduler(nats_server.url, consumer_prefix="sched-a")
    b = await start_scheduler(nats_server.url, consumer_prefix="sched-b", scheduler_name="alnair-b")
    try:
        pods = []
        for i in range(24):  # 24 × 20 GiB = 480 GiB asked of 320 GiB: 16 fit
            pods.append(adapter.pending(f"a-{i}", 20, 10))
            pods.append(adapter.pending(f"b-{i}", 20, 10, scheduler="alnair-b"))
        created = await asyncio.gather(*pods)

        async def all_answered() -> bool:
            return all(p.uid in seen.binds or p.uid in seen.failures for p in created)

        from alnair_common.testing import wait_for

        await wait_for(all_answered, timeout=30, what="every pod placed or refused")
        cards = await assert_within_capacity(bus)
        placed = [p for p in created if p.uid in seen.binds]
        assert len(placed) == 16 == sum(len(c.shares) for c in cards.values())
        per_card: dict[str, int] = {}
        for p in placed:
            uuid_ = seen.binds[p.uid].assignment.gpu_uuid
            per_card[uuid_] = per_card.get(uuid_, 0) + 20
        assert all(v <= 80 for v in per_card.values()), per_card
        conflicts = [s.engine for s, _ in (a, b)]
        assert all(e.active for e in conflicts)
    finally:
        await stop_scheduler(*a)
        await stop_scheduler(*b)


async def test_lost_allocations_are_rebuilt_from_bound_workloads(nats_server: NatsServer, bus: Bus) -> None:
    """The bucket is purged while the scheduler is down: the replayed Bound events (which
    carry each pod's assignment) put the shares back before anything new is placed."""
    from alnair.v1 import allocation_pb2
    from alnair_common import TypedKV

    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    running = await adapter.pending("running", 60, 50)
    (decision,) = await seen.bound(running)
    await adapter.bound(running, decision)
    await stop_scheduler(service, task)

    kv = await TypedKV.open(bus, "gpu_allocations", allocation_pb2.CardAllocation)
    for key in await kv.keys():
        await kv.delete(key)
    assert not await committed(bus)

    newcomer = await adapter.pending("newcomer", 40, 40)
    service, task = await start_scheduler(nats_server.url)
    try:
        failure, code = await seen.failed(newcomer, "insufficient-memory")
        assert "gpu0 20 GiB/50 %" in failure.reason
        cards = await assert_within_capacity(bus)
        assert [s.workload.uid for s in cards[decision.assignment.gpu_uuid].shares] == [running.uid]
        assert newcomer.uid not in seen.binds
    finally:
        await stop_scheduler(service, task)
