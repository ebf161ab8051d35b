"""The GPU allocator: goodput-greedy over measured scaling, mins first, hysteresis, cards."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alnair_elastic_job import WorkerRequest
from alnair_elastic_job._allocator import (
    ElasticDemand,
    FreeCard,
    Hysteresis,
    ScalingCurve,
    allocate,
    fits,
    never_fits,
)

WHOLE = WorkerRequest(whole_gpus=1)
HALF = WorkerRequest(40, 50)
NO_HYSTERESIS = Hysteresis(0.0, 0.0)


def cards(n: int, node: str = "n1", memory: int = 80, compute: int = 100) -> list[FreeCard]:
    return [FreeCard(node, f"{node}-g{i}", memory, compute) for i in range(n)]


def test_the_curve_interpolates_measured_points_and_extends_with_efficiency() -> None:
    c = ScalingCurve.of({1: 100.0, 4: 340.0}, efficiency=0.5)
    assert c.rate(1) == 100.0 and c.rate(4) == 340.0
    assert c.rate(2) == pytest.approx(180.0)          # between 1 and 4
    assert c.rate(6) == pytest.approx(340.0 + 2 * 0.5 * 85.0)
    assert ScalingCurve(efficiency=0.8).speedup(3) == pytest.approx(2.6)
    assert ScalingCurve.of({2: 150.0}).rate(1) == pytest.approx(75.0), "from (0, 0) to the first"
    assert ScalingCurve().rate(0) == 0.0


def test_workers_go_where_they_speed_a_job_up_most() -> None:
    good = ElasticDemand("good", 1, 8, WHOLE, ScalingCurve.of({1: 10, 2: 20, 4: 39, 8: 76}))
    poor = ElasticDemand("poor", 1, 8, WHOLE, ScalingCurve.of({1: 10, 2: 12, 4: 13, 8: 13}))
    grant = allocate(cards(8), [good, poor], 0.0, NO_HYSTERESIS)
    assert grant == {"good": 7, "poor": 1}


def test_mins_come_first_and_a_waiting_job_is_admitted_by_shrinking_others() -> None:
    a = ElasticDemand("a", 1, 4, WHOLE, current=4, arrival=0.0)
    b = ElasticDemand("b", 2, 4, WHOLE, arrival=1.0)
    grant = allocate(cards(4), [a, b], 1000.0)
    assert grant["b"] == 2 and grant["a"] == 2
    c = ElasticDemand("c", 3, 3, WHOLE, arrival=2.0)
    assert allocate(cards(4), [a, b, c], 1000.0)["c"] == 0, "its min does not fit beside theirs"


def test_a_waiting_job_backfills_past_one_that_does_not_fit() -> None:
    big = ElasticDemand("big", 4, 4, WHOLE, arrival=0.0)
    small = ElasticDemand("small", 1, 2, WHOLE, arrival=1.0)
    assert allocate(cards(3), [big, small], 0.0) == {"big": 0, "small": 2}


def test_fractional_workers_pack_onto_cards_and_whole_ones_need_untouched_cards() -> None:
    frac = ElasticDemand("frac", 1, 8, WorkerRequest(30, 40), arrival=0.0)
    whole = ElasticDemand("whole", 1, 2, WorkerRequest(whole_gpus=2), arrival=1.0)
    grant = allocate(cards(2, "a") + cards(2, "b"), [frac, whole], 0.0, NO_HYSTERESIS)
    assert grant["whole"] == 1, "two untouched cards of one node"
    assert grant["frac"] == 4, "two 40 % shares per card on the other node"
    assert allocate(cards(1, "a") + cards(1, "b"), [whole], 0.0)["whole"] == 0, "never across nodes"


def test_a_job_the_idle_cluster_cannot_hold_is_told_what_is_missing() -> None:
    assert never_fits(cards(2), HALF, 4) == "", "four 40 GiB / 50 % shares fit two idle cards"
    big = never_fits(cards(2), WorkerRequest(200, 30), 1)
    assert "200 GiB and 30 % of one card" in big and "the largest 80 GiB" in big and "spec.worker" in big
    spread = never_fits(cards(1, "a") + cards(1, "b"), WorkerRequest(whole_gpus=2), 1)
    assert "2 whole GPUs on one node" in spread and "at most 1 on one node" in spread
    many = never_fits(cards(2), WHOLE, 3)
    assert many.startswith("minReplicas=3 workers, each of 1 whole GPU on one node, do not fit")
    assert "2 cards on 1 node" in many
    assert "no healthy GPU" in never_fits([], WHOLE, 1)


def test_a_recent_change_holds_and_a_small_gain_does_not_move_a_job() -> None:
    scales = ScalingCurve(efficiency=1.0)
    flat = ScalingCurve.of({1: 100, 2: 110, 3: 115, 4: 118})
    a = ElasticDemand("a", 1, 4, WHOLE, scales, current=1, changed_at=900.0, arrival=0.0)
    b = ElasticDemand("b", 1, 4, WHOLE, flat, current=3, changed_at=900.0, arrival=1.0)
    h = Hysteresis(min_gain=0.1, min_interval_seconds=300.0)
    assert allocate(cards(4), [a, b], 1000.0, h) == {"a": 1, "b": 3}, "changed 100 s ago"
    assert allocate(cards(4), [a, b], 1300.0, h) == {"a": 3, "b": 1}, "rebalanced once allowed"
    even = ScalingCurve(efficiency=0.9)
    a2 = ElasticDemand("a", 1, 4, WHOLE, even, current=1, arrival=0.0)
    b2 = ElasticDemand("b", 1, 4, WHOLE, even, current=3, arrival=1.0)
    assert allocate(cards(4), [a2, b2], 1e6, h) == {"a": 1, "b": 3}, "2+2 is worth no more than 1+3"
    noisy = ScalingCurve.of({1: 100, 2: 190, 3: 275, 4: 350})
    a3 = ElasticDemand("a", 1, 4, WHOLE, ScalingCurve.of({1: 100, 2: 195, 3: 285, 4: 370}),
                       current=2, arrival=0.0)
    b3 = ElasticDemand("b", 1, 4, WHOLE, noisy, current=2, arrival=1.0)
    assert allocate(cards(4), [a3, b3], 1e6, h) == {"a": 2, "b": 2}, "a few % is noise, not a reason"
    assert allocate(cards(4), [a3, b3], 1e6, NO_HYSTERESIS) != {"a": 2, "b": 2}


def test_growth_stops_at_max_and_leaves_the_rest_free() -> None:
    d = ElasticDemand("d", 1, 3, WHOLE)
    assert allocate(cards(8), [d], 0.0) == {"d": 3}


def check_fits(free: list[FreeCard], jobs: list[ElasticDemand], grant: dict[str, int]) -> None:
    compute = sum(grant[d.name] * (d.request.whole_gpus * 100 or d.request.compute_percent) for d in jobs)
    memory = sum(grant[d.name] * d.request.memory_gib for d in jobs)
    assert compute <= sum(c.compute_percent for c in free)
    assert memory <= sum(c.memory_gib for c in free)
    wholes = sum(grant[d.name] * d.request.whole_gpus for d in jobs)
    assert wholes <= sum(1 for c in free if c.compute_percent >= 100)


requests = st.sampled_from([WHOLE, HALF, WorkerRequest(20, 25), WorkerRequest(whole_gpus=2)])
curves = st.one_of(st.builds(ScalingCurve, efficiency=st.floats(0.1, 1.0)),
                   st.builds(lambda a, b: ScalingCurve.of({1: 100.0, 2: 100.0 + a, 4: 100.0 + a + b}),
                             st.floats(1, 100), st.floats(0, 200)))
demands = st.builds(
    lambda i, lo, extra, req, curve, cur, ago: ElasticDemand(
        f"j{i}", lo, lo + extra, req, curve, current=min(cur, lo + extra), changed_at=1000.0 - ago,
        arrival=float(i)),
    st.integers(0, 1000), st.integers(1, 3), st.integers(0, 4), requests, curves,
    st.integers(0, 6), st.sampled_from([0.0, 100.0, 1000.0]))
clusters = st.lists(st.builds(lambda node, i, mem, comp: FreeCard(f"n{node}", f"n{node}-g{i}", mem, comp),
                              st.integers(0, 2), st.integers(0, 3), st.sampled_from([40, 80]),
                              st.sampled_from([50, 100])), max_size=10).map(
    lambda cs: list({c.uuid: c for c in cs}.values()))
job_lists = st.lists(demands, max_size=8, unique_by=lambda d: d.name)


@settings(max_examples=300, deadline=None)
@given(clusters, job_lists)
def test_grants_fit_respect_min_and_max_and_keep_running_mins(free: list[FreeCard],
                                                               jobs: list[ElasticDemand]) -> None:
    grant = allocate(free, jobs, 1000.0)
    assert set(grant) == {d.name for d in jobs}
    check_fits(free, jobs, grant)
    for d in jobs:
        assert grant[d.name] == 0 or d.min_replicas <= grant[d.name] <= d.max_replicas
    # Running jobs' mins, oldest first, are served before anything else: each running job
    # whose min fits after the older running jobs' mins keeps at least its min.
    served: list[WorkerRequest] = []
    for d in sorted((d for d in jobs if d.current >= d.min_replicas), key=lambda d: (d.arrival, d.name)):
        if fits(free, [*served, *[d.request] * d.min_replicas]):
            served += [d.request] * d.min_replicas
            assert grant[d.name] >= d.min_replicas, d.name
    assert fits(free, [d.request for d in jobs for _ in range(grant[d.name])])


@settings(max_examples=200, deadline=None)
@given(clusters, job_lists, st.randoms(use_true_random=False))
def test_the_result_depends_on_the_inputs_not_their_order(free, jobs, rnd: random.Random) -> None:
    grant = allocate(free, jobs, 1000.0)
    shuffled_jobs, shuffled_cards = list(jobs), list(free)
    rnd.shuffle(shuffled_jobs)
    rnd.shuffle(shuffled_cards)
    assert allocate(shuffled_cards, shuffled_jobs, 1000.0) == grant


@settings(max_examples=300, deadline=None)
@given(clusters, job_lists, st.booleans())
def test_applying_a_grant_and_asking_again_changes_nothing(free, jobs, settled: bool) -> None:
    """No thrash: once the jobs have the sizes granted, the next round grants the same, at
    once, and (when no size was held back by a recent change) long after too."""
    from dataclasses import replace
    h = Hysteresis(0.1, 300.0)
    if settled:
        jobs = [replace(d, changed_at=-1e9) for d in jobs]
    grant = allocate(free, jobs, 1000.0, h)
    applied = [replace(d, current=grant[d.name], changed_at=1000.0 if grant[d.name] != d.current
                       else d.changed_at) for d in jobs]
    assert allocate(free, applied, 1000.0, h) == grant
    if settled:
        assert allocate(free, applied, 1e6, h) == grant
