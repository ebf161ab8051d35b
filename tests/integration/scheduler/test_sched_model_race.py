"""The model follows KV even when a commit and a release of the same card interleave.

Drives the engine directly against a real nats-server: on one card, workload X is released
(it finished) while workload Y is committed, over and over, concurrently. A commit that read
the card before the release must not put X back into the model after the release landed:
a model that still counts X starves whoever needs that room (a gang, typically).
"""

from __future__ import annotations

import asyncio

from sched_harness import Observer, committed

from alnair_common import Bus
from alnair_scheduler._domain import Card, Phase, Profile, Request, Workload, WorkloadId
from alnair_scheduler._engine import Engine
from alnair_scheduler._outbox import Outbox
from alnair_scheduler._store import AllocationStore


class SlowReplyStore(AllocationStore):
    """The commit's answer comes back late (a busy loop, a slow link): the release of the
    other workload runs entirely while the commit's result is still on its way."""

    async def commit(self, card, share):  # type: ignore[no-untyped-def]
        shares = await super().commit(card, share)
        await asyncio.sleep(0.05)
        return shares


def workload(uid: str) -> Workload:
    return Workload(WorkloadId(uid, uid, "default"), Request(10, 10), Phase.PENDING,
                    "alnair-scheduler", 0, 0.0)


async def test_commit_racing_release_keeps_model_equal_to_kv(bus: Bus) -> None:
    await Observer.attach(bus)
    store = SlowReplyStore((await AllocationStore.open(bus)).kv)
    engine = Engine(store, Outbox(bus, "race"), instance="race",
                    default_profile=Profile.COST_SAVING, scheduler_name="alnair-scheduler")
    card = Card("n1", "GPU-race-0", 0, 80, 100)
    engine.on_inventory("n1", [card], 0.0)
    for i in range(10):
        x, y = workload(f"x{i}"), workload(f"y{i}")
        engine.workloads[x.ref.uid] = x
        engine.workloads[y.ref.uid] = y
        assert await engine.commit(x, card, Profile.COST_SAVING, "", announce=False)
        engine.workloads.pop(x.ref.uid)
        await asyncio.gather(engine.commit(y, card, Profile.COST_SAVING, "", announce=False),
                             engine.release(x.ref.uid, ""))
        in_kv = {s.workload.uid for s in (await committed(bus))[card.uuid].shares}
        state = engine.cluster.card(card.uuid)
        assert state is not None
        assert set(state.shares) == in_kv, f"round {i}: model {set(state.shares)} != KV {in_kv}"
        assert x.ref.uid not in in_kv and not engine.cluster.is_placed(x.ref.uid)
        await engine.release(y.ref.uid, "")
