"""Card-level placement at the bus level: decisions, profiles, reasons, releases."""

from __future__ import annotations

from sched_harness import Adapter, Observer, assert_within_capacity, start_scheduler, stop_scheduler

from alnair_common import Bus
from alnair_common.natsd import NatsServer


async def test_places_on_one_card_and_commits_the_share(nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 2, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        pod = await adapter.pending("train-1", 30, 40)
        (decision,) = await seen.bound(pod)
        a = decision.assignment
        assert (a.node, a.memory_gib, a.compute_percent, a.profile) == ("node-a", 30, 40, "cost-saving")
        assert a.gpu_uuid in ("GPU-node-a-0", "GPU-node-a-1")
        assert a.filtered_at.seconds > 0 and decision.scheduler.startswith("scheduler-")
        cards = await assert_within_capacity(bus)
        assert [s.workload.uid for s in cards[a.gpu_uuid].shares] == [pod.uid]
    finally:
        await stop_scheduler(service, task)


async def test_cost_saving_packs_and_high_performance_spreads(nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("node-a", "node-b"):
        await adapter.inventory(node, 2, 80)
    service, task = await start_scheduler(nats_server.url, scheduling_profile="cost-saving")
    try:
        packed = [await adapter.pending(f"pack-{i}", 10, 10) for i in range(4)]
        decisions = await seen.bound(*packed)
        # Bin-packing: all four fit on one card, so they share it.
        assert len({d.assignment.gpu_uuid for d in decisions}) == 1
        spread = [await adapter.pending(f"spread-{i}", 10, 10, profile="high-performance")
                  for i in range(3)]
        decisions = await seen.bound(*spread)
        cards = {d.assignment.gpu_uuid for d in decisions}
        assert len(cards) == 3, cards
        # Spreading starts on the empty node, then takes the other empty card.
        assert packed and decisions[0].assignment.node != (await seen.bound(packed[0]))[0].assignment.node
        assert all(d.assignment.profile == "high-performance" for d in decisions)
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)


async def test_why_pending_names_each_card_then_a_finished_share_is_reused(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    await adapter.inventory("node-b", 1, 48)
    service, task = await start_scheduler(nats_server.url)
    try:
        big = await adapter.pending("big", 60, 50)
        (first,) = await seen.bound(big)
        assert first.assignment.node == "node-a"
        # Cost-saving prefers the used node-a, but only node-b has 40 GiB left.
        fits_b = await adapter.pending("fits-b", 40, 20)
        (placed,) = await seen.bound(fits_b)
        assert placed.assignment.node == "node-b"
        third = await adapter.pending("third", 30, 10)
        failure, code = await seen.failed(third, "insufficient-memory")
        assert not failure.permanent and code == "insufficient-memory"
        assert failure.reason.startswith("no card with 30 GiB and 10 % free: ")
        by_node = {r.node: r for r in failure.rejections}
        assert by_node["node-a"].message == "30 GiB and 10 % requested; free: gpu0 20 GiB/50 %"
        assert by_node["node-b"].message == "30 GiB and 10 % requested; free: gpu0 8 GiB/80 %"
        assert "node-a: gpu0 20 GiB/50 %; node-b: gpu0 8 GiB/80 %" in failure.reason
        assert any(e.object.uid == third.uid and e.type == "Warning" for e in seen.events)
        await adapter.finish(big)
        (reused,) = await seen.bound(third)
        assert reused.assignment.gpu_uuid == first.assignment.gpu_uuid
        cards = await assert_within_capacity(bus)
        assert big.uid not in {s.workload.uid for a in cards.values() for s in a.shares}
    finally:
        await stop_scheduler(service, task)


async def test_unhealthy_cards_are_skipped_with_their_reason(nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 2, 80, unhealthy=(0, 1))
    await adapter.inventory("node-b", 1, 80, via_kv=True)
    service, task = await start_scheduler(nats_server.url)
    try:
        pod = await adapter.pending("p", 10, 10)
        (d,) = await seen.bound(pod)
        assert d.assignment.node == "node-b"  # inventory from the KV bucket counts too
        await adapter.inventory("node-b", 1, 80, unhealthy=(0,), via_kv=True)
        blocked = await adapter.pending("blocked", 10, 10)
        failure, code = await seen.failed(blocked, "unhealthy")
        assert "XID 79" in {r.node: r for r in failure.rejections}["node-a"].message
    finally:
        await stop_scheduler(service, task)


async def test_utilisation_aware_prefers_measured_headroom(nats_server: NatsServer, bus: Bus) -> None:
    from sched_harness import GIB, stamp

    from alnair.v1 import metrics_pb2
    from alnair_common import subjects
    from alnair_common.testing import wait_for

    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 2, 80)
    service, task = await start_scheduler(nats_server.url, scheduling_profile="utilisation-aware")
    try:
        # Nothing is allocated, but gpu0 is busy (someone outside Alnair, or a tenant
        # burning more than it asked for) and gpu1 holds 75 GiB of memory.
        batch = metrics_pb2.NodeSampleBatch(node="node-a", sampled_at=stamp(), gpus=[
            metrics_pb2.GpuSample(gpu_uuid="GPU-node-a-0", gpu_index=0, utilization_ratio=0.95,
                                  memory_used_bytes=2 * GIB, memory_total_bytes=80 * GIB),
            metrics_pb2.GpuSample(gpu_uuid="GPU-node-a-1", gpu_index=1, utilization_ratio=0.10,
                                  memory_used_bytes=75 * GIB, memory_total_bytes=80 * GIB),
        ])
        await bus.publish(subjects.gpu_metrics("node-a"), batch)

        async def measured() -> bool:
            return service.engine.util.load("GPU-node-a-1") is not None

        await wait_for(measured, what="samples reached the scheduler")
        small = await adapter.pending("small", 4, 20)
        (d,) = await seen.bound(small)
        assert d.assignment.gpu_index == 1 and d.assignment.profile == "utilisation-aware"
        # 10 GiB no longer fits where 75 GiB are measured in use, although nothing is committed.
        large = await adapter.pending("large", 10, 20)
        (d,) = await seen.bound(large)
        assert d.assignment.gpu_index == 0
    finally:
        await stop_scheduler(service, task)
