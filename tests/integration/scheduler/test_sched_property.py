"""Property: random requests, completions and scheduler restarts never over-allocate a card.

Each example runs against its own real nats-server. After every step the test waits until
the scheduler has settled — every pending workload either holds a card or no card has room
for it (so the scheduler cannot pass by placing nothing) — then checks the committed shares
in KV *and* the bind decisions an adapter would act on.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_harness import Adapter, Observer, Pod, assert_within_capacity, start_scheduler, stop_scheduler

from alnair_common import Bus
from alnair_common.natsd import NatsServer, free_port
from alnair_common.testing import wait_for

CARDS = {"GPU-n1-0": 40, "GPU-n1-1": 40, "GPU-n2-0": 24}  # memory GiB; 100 % compute each

request = st.tuples(st.just("request"), st.integers(1, 44), st.integers(1, 100),
                    st.sampled_from(["cost-saving", "high-performance", "utilisation-aware"]))
complete = st.tuples(st.just("complete"), st.integers(0, 1000))
restart = st.tuples(st.just("restart"))
steps = st.lists(st.one_of(request, request, complete, restart), min_size=1, max_size=14)


@pytest.mark.timeout(300)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps)
def test_random_requests_completions_and_restarts_never_overallocate(plan: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", port=free_port())
        server.start()
        try:
            asyncio.run(_run(server, plan))
        finally:
            server.stop()


async def _run(server: NatsServer, plan: list[tuple]) -> None:
    bus = await Bus.connect(server.url, service="property")
    seen = await Observer.attach(bus)
    adapter = Adapter(bus)
    await adapter.inventory("n1", [(40, 100), (40, 100)])
    await adapter.inventory("n2", [(24, 100)])
    running = await start_scheduler(server.url, tick_seconds=0.2)
    live: list[Pod] = []
    try:
        for i, step in enumerate(plan):
            if step[0] == "request":
                live.append(await adapter.pending(f"p{i}", step[1], step[2], profile=step[3]))
            elif step[0] == "complete" and live:
                pod = live.pop(step[1] % len(live))
                await adapter.finish(pod)
            elif step[0] == "restart":
                await stop_scheduler(*running)
                running = await start_scheduler(server.url, tick_seconds=0.2)
            await _settled(bus, seen, live)
    finally:
        await stop_scheduler(*running)
        await bus.drain()


async def _settled(bus: Bus, seen: Observer, live: list[Pod]) -> None:
    live_ids = {p.uid for p in live}

    async def probe() -> bool:
        cards = await assert_within_capacity(bus)
        holders = {s.workload.uid: uuid_ for uuid_, c in cards.items() for s in c.shares}
        if set(holders) - live_ids:
            return False  # a finished workload's share not yet released
        free = {u: [cap, 100] for u, cap in CARDS.items()}
        for uuid_, c in cards.items():
            for s in c.shares:
                free[uuid_][0] -= s.memory_gib
                free[uuid_][1] -= s.compute_percent
        for p in live:
            if p.uid in holders:
                # What an adapter was told matches what is committed.
                if seen.binds.get(p.uid) is None or seen.binds[p.uid].assignment.gpu_uuid != holders[p.uid]:
                    return False
                continue
            if any(m >= p.memory_gib and c >= p.compute_percent for m, c in free.values()):
                return False  # it fits somewhere: the scheduler has not caught up yet
        return True

    await wait_for(probe, timeout=20, what="scheduler settled with every card within capacity")
    # Over-allocation through decisions: live pods' decided shares per card.
    per_card: dict[str, list[int]] = {}
    for p in live:
        d = seen.binds.get(p.uid)
        if d is not None:
            m, c = per_card.setdefault(d.assignment.gpu_uuid, [0, 0])
            per_card[d.assignment.gpu_uuid] = [m + p.memory_gib, c + p.compute_percent]
    for uuid_, (m, c) in per_card.items():
        assert m <= CARDS[uuid_] and c <= 100, f"{uuid_}: decisions add up to {m} GiB / {c} %"
