"""Gang scheduling at the bus level: all-or-nothing, no deadlock, timeouts, PodGroup status."""

from __future__ import annotations

from sched_harness import Adapter, Observer, assert_within_capacity, committed, start_scheduler, stop_scheduler

from alnair_common import Bus
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for


async def test_gang_of_8_waits_whole_then_binds_all_when_capacity_appears(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("n1", "n2", "n3"):
        await adapter.inventory(node, 2, 80)  # 6 cards; each member needs a card of its own
    service, task = await start_scheduler(nats_server.url)
    try:
        await adapter.podgroup("train", min_member=8)
        members = [await adapter.pending(f"train-{i}", 50, 60, group="train") for i in range(8)]
        for m in members:
            failure, code = await seen.failed(m, "gang-unschedulable")
            assert failure.reason.startswith("PodGroup default/train: only 6 of the 8 members fit")
        status = await seen.status("train", "Pending", says="only 6 of the 8")
        assert status["scheduled"] == 0
        assert not seen.binds and not await committed(bus)  # nothing held while waiting
        await adapter.inventory("n4", 2, 80)
        decisions = await seen.bound(*members)
        assert len({d.assignment.gpu_uuid for d in decisions}) == 8
        assert {d.pod_group for d in decisions} == {"train"}
        status = await seen.status("train", "Scheduled")
        assert status["scheduled"] == 8
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)


async def test_two_gangs_competing_for_the_same_capacity_never_deadlock(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("n1", "n2", "n3"):
        await adapter.inventory(node, 2, 80)  # 6 cards, two gangs of 4 whole-card members
    service, task = await start_scheduler(nats_server.url)
    try:
        await adapter.podgroup("a", min_member=4)
        await adapter.podgroup("b", min_member=4)
        a_members, b_members = [], []
        for i in range(4):  # interleaved arrival: the classic half-and-half deadlock setup
            a_members.append(await adapter.pending(f"a-{i}", 60, 50, group="a"))
            b_members.append(await adapter.pending(f"b-{i}", 60, 50, group="b"))

        async def one_gang_placed() -> tuple[str, list, list] | None:
            for name, won, lost in (("a", a_members, b_members), ("b", b_members, a_members)):
                if all(m.uid in seen.binds for m in won):
                    return name, won, lost
            return None

        winner, won, lost = await wait_for(one_gang_placed, what="one whole gang placed")
        loser = "b" if winner == "a" else "a"
        await seen.status(loser, "Pending")
        assert not any(m.uid in seen.binds for m in lost), "the losing gang got a partial placement"
        cards = await assert_within_capacity(bus)
        assert sum(len(c.shares) for c in cards.values()) == 4
        for m in won:
            await adapter.finish(m)
        await seen.bound(*lost)
        await seen.status(loser, "Scheduled")
        cards = await assert_within_capacity(bus)
        holders = {s.workload.uid for c in cards.values() for s in c.shares}
        assert holders == {m.uid for m in lost}
    finally:
        await stop_scheduler(service, task)


async def test_gang_times_out_with_a_reason_and_members_wait_for_their_podgroup(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("n1", 4, 80)
    service, task = await start_scheduler(nats_server.url, tick_seconds=0.2)
    try:
        early = await adapter.pending("early-0", 10, 10, group="late-group")
        failure, code = await seen.failed(early, "pod-group-missing")
        assert "no such PodGroup exists yet" in failure.reason and not failure.permanent
        await adapter.podgroup("late-group", min_member=1)
        await seen.bound(early)

        await adapter.podgroup("short", min_member=3, timeout_s=1)
        short = [await adapter.pending(f"short-{i}", 10, 10, group="short") for i in range(2)]
        failure, code = await seen.failed(short[0], "gang-incomplete")
        assert "needs 3 members placed together; 0 placed and " in failure.reason

        async def incomplete() -> bool:
            return any(st["message"].endswith("needs 3 members placed together; 0 placed and 2 "
                                              "pending so far") for st in seen.statuses["default/short"])

        await wait_for(incomplete, what="PodGroup status names the missing member")
        status = await seen.status("short", "Failed", timeout=10)
        assert status["message"].startswith("PodGroup default/short timed out after 1 s with 0 of")
        failure, code = await seen.failed(short[1], "gang-timeout")
        assert failure.permanent and failure.code == "gang-timeout"
        assert not any(m.uid in seen.binds for m in short)
    finally:
        await stop_scheduler(service, task)


async def test_members_beyond_min_member_are_placed_after_the_gang(nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("n1", 2, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        await adapter.podgroup("elastic", min_member=2)
        first = [await adapter.pending(f"e-{i}", 40, 40, group="elastic") for i in range(2)]
        await seen.bound(*first)
        extra = await adapter.pending("e-2", 40, 40, group="elastic")
        (d,) = await seen.bound(extra)
        assert d.pod_group == "elastic"
        status = await seen.status("elastic", "Scheduled")
        assert status["scheduled"] == 3
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)


async def test_a_blocked_gang_is_not_starved_by_later_small_workloads(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("n1", 2, 80)
    service, task = await start_scheduler(nats_server.url, gang_reserve_after_seconds=0.5,
                                          tick_seconds=0.2)
    try:
        first = await adapter.pending("small-0", 50, 50)
        await seen.bound(first)
        await adapter.podgroup("wide", min_member=2)
        wide = [await adapter.pending(f"wide-{i}", 60, 50, group="wide") for i in range(2)]
        await seen.failed(wide[0], "gang-unschedulable")
        await seen.status("wide", "Pending")

        async def holding() -> bool:
            return all(g.blocked_since is not None and service.engine.clock() - g.blocked_since > 0.6
                       for g in service.engine.gangs.values())

        await wait_for(holding, what="the gang blocked past gang_reserve_after_seconds")
        # card1 is free, and would take this 50 GiB pod — but the gang came first.
        later = await adapter.pending("small-1", 50, 50)
        failure, code = await seen.failed(later, "held-for-gang")
        assert "older PodGroup default/wide" in failure.reason
        assert later.uid not in seen.binds
        await adapter.finish(first)
        await seen.bound(*wide)
        await seen.status("wide", "Scheduled")
        assert later.uid not in seen.binds  # both cards now belong to the gang
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)


async def test_a_gang_too_big_for_the_empty_cluster_holds_nobody_back(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("n1", 2, 80)
    service, task = await start_scheduler(nats_server.url, gang_reserve_after_seconds=0.2,
                                          tick_seconds=0.1)
    try:
        await adapter.podgroup("huge", min_member=3)
        huge = [await adapter.pending(f"huge-{i}", 60, 50, group="huge") for i in range(3)]
        await seen.failed(huge[0], "gang-unschedulable")

        async def past_threshold() -> bool:
            g = service.engine.gangs["default/huge"]
            return g.blocked_since is not None and service.engine.clock() - g.blocked_since > 0.3

        await wait_for(past_threshold, what="the gang blocked past gang_reserve_after_seconds")
        small = await adapter.pending("small", 10, 10)
        await seen.bound(small)
    finally:
        await stop_scheduler(service, task)
