"""The controller end to end (allocator + state machine) under any order of facts: the
workers it keeps never need more GPU than the cards have, and no job is over its max."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import alnair_elastic_job as ej

JOBS = [
    ej.TrainingJob("a", ("python", "a.py"), 1, 4, ej.WorkerRequest(whole_gpus=1)),
    ej.TrainingJob("b", ("python", "b.py"), 2, 3, ej.WorkerRequest(40, 50)),
    ej.TrainingJob("c", ("python", "c.py"), 2, 2, ej.WorkerRequest(whole_gpus=1), launcher=ej.Launcher.TORCH),
]
KEYS = [f"default/{j.name}" for j in JOBS]
CLUSTERS = [[ej.FreeCard("n1", f"g{i}", 80) for i in range(n)] for n in (0, 2, 4, 6)]

facts = st.one_of(
    st.tuples(st.just("drive"), st.integers(0, 2)),  # what a healthy adapter does: place, meet
    st.tuples(st.just("drive"), st.integers(0, 2)),
    st.tuples(st.just("cards"), st.integers(0, len(CLUSTERS) - 1)),
    st.tuples(st.just("place"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("rdzv"), st.integers(0, 2)),
    st.tuples(st.just("exit"), st.integers(0, 2), st.integers(0, 3), st.sampled_from([0, 1, None])),
    st.tuples(st.just("scale"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 30.0, 700.0])),
)


def gpu_need(c: ej.Controller) -> tuple[int, int]:
    compute = memory = 0
    for t in c.jobs.values():
        if t.status.completing:
            continue
        n, r = len(t.status.alive), t.job.request
        compute += n * (r.whole_gpus * 100 or r.compute_percent)
        memory += n * r.memory_gib
    return compute, memory


@settings(max_examples=300, deadline=None)
@given(st.lists(facts, max_size=40))
def test_live_workers_fit_the_cards_and_grants(script: list[tuple]) -> None:
    c, now, cards, fresh = ej.Controller(ej.Hysteresis(0.1, 60.0)), 0.0, CLUSTERS[2], 0
    for j in JOBS:
        c.submit(j, now)
    for fact in script:
        now += 1.0
        kind = fact[0]
        if kind == "cards":
            cards = CLUSTERS[fact[1]]
        elif kind == "place":
            new = frozenset(f"w{fresh + i}" for i in range(fact[2]))
            fresh += fact[2]
            c.apply(KEYS[fact[1]], ej.WorkersPlaced(new), now)
        elif kind == "drive":
            s = c.jobs[KEYS[fact[1]]].status
            new = frozenset(f"w{fresh + i}" for i in range(max(0, s.target - len(s.alive))))
            fresh += len(new)
            c.apply(KEYS[fact[1]], ej.WorkersPlaced(new), now)
            s = c.jobs[KEYS[fact[1]]].status
            c.apply(KEYS[fact[1]], ej.RendezvousComplete(s.alive, s.heard_round + 1), now)
        elif kind == "rdzv":
            s = c.jobs[KEYS[fact[1]]].status
            c.apply(KEYS[fact[1]], ej.RendezvousComplete(s.alive, s.heard_round + 1), now)
        elif kind == "exit":
            alive = sorted(c.jobs[KEYS[fact[1]]].status.alive)
            if alive:
                c.apply(KEYS[fact[1]], ej.WorkerExited(alive[fact[2] % len(alive)], fact[3]), now)
        elif kind == "scale":
            try:
                c.apply(KEYS[fact[1]], ej.ScaleCommand(fact[2]), now)
            except ej.TransitionError:
                pass
        else:
            now += fact[1]
            c.tick(now)
        c.reallocate(cards, now)
        compute, memory = gpu_need(c)
        assert compute <= sum(card.compute_percent for card in cards)
        assert memory <= sum(card.memory_gib for card in cards)
        for t in c.jobs.values():
            plan = ej.worker_actions(t)
            if t.status.phase not in (ej.Phase.SCHEDULING, ej.Phase.RESCALING, ej.Phase.RUNNING):
                assert plan.create == 0, (t.key, t.status.phase)
            assert len(t.status.alive) + plan.create <= t.job.max_replicas
            assert len(t.status.alive) <= t.job.max_replicas
            if not t.status.completing:
                assert len(t.status.alive) <= t.status.grant, (t.key, t.status)
