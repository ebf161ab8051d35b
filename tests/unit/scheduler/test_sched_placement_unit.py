"""Placement, reasons and gang planning on the plain model (no servers)."""

from __future__ import annotations

import pytest

from alnair_scheduler._cluster import Cluster
from alnair_scheduler._domain import Card, Phase, Profile, Request, Share, Workload, WorkloadId, validate_request
from alnair_scheduler._errors import InvalidRequestError
from alnair_scheduler._gang import GangShortfall, plan_gang
from alnair_scheduler._placement import NoFit, choose_card, too_big
from alnair_scheduler._utilisation import GIB, CardSample, UtilisationTracker


def cluster(**nodes: list[int]) -> Cluster:
    c = Cluster()
    for node, mems in nodes.items():
        c.set_inventory(node, [Card(node, f"{node}-{i}", i, m, 100) for i, m in enumerate(mems)])
    return c


def share(uid: str, mem: int, comp: int) -> Share:
    return Share(WorkloadId(uid, uid, "default"), mem, comp)


def test_cost_saving_takes_the_fullest_node_then_card() -> None:
    c = cluster(a=[80, 80], b=[80, 80])
    c.add_share("b-1", share("x", 40, 40))
    got = choose_card(c, Request(10, 10), Profile.COST_SAVING)
    assert not isinstance(got, NoFit) and got.card.uuid == "b-1"


def test_high_performance_takes_the_emptiest_card_on_the_emptiest_node() -> None:
    c = cluster(a=[80, 80], b=[80, 80])
    c.add_share("a-0", share("x", 40, 40))
    c.add_share("b-0", share("y", 8, 8))
    got = choose_card(c, Request(10, 10), Profile.HIGH_PERFORMANCE)
    assert not isinstance(got, NoFit) and got.card.uuid == "b-1"


def test_utilisation_aware_uses_measured_peaks_and_falls_back_to_allocations() -> None:
    now = [100.0]
    util = UtilisationTracker(window_seconds=10, clock=lambda: now[0])
    c = cluster(a=[80, 80])
    c.add_share("a-1", share("x", 10, 30))  # committed 30 % on a-1, nothing on a-0
    util.add(CardSample("a-0", 95.0, 0.9, 1 * GIB, 80 * GIB))
    got = choose_card(c, Request(10, 10), Profile.UTILISATION_AWARE, util)
    assert not isinstance(got, NoFit) and got.card.uuid == "a-1"  # 90 % measured > 30 % committed
    now[0] = 106.0  # the sample ages out of the window: back to allocations
    got = choose_card(c, Request(10, 10), Profile.UTILISATION_AWARE, util)
    assert not isinstance(got, NoFit) and got.card.uuid == "a-0"


def test_no_fit_lists_nodes_with_the_most_room_first() -> None:
    c = cluster(a=[80], b=[48], c=[16], d=[8])
    c.add_share("a-0", share("x", 60, 50))
    got = choose_card(c, Request(50, 10), Profile.COST_SAVING)
    assert isinstance(got, NoFit) and got.code == "insufficient-memory"
    assert got.summary == ("no card with 50 GiB and 10 % free: b: gpu0 48 GiB/100 %; "
                           "a: gpu0 20 GiB/50 %; c: gpu0 16 GiB/100 % (and 1 more nodes)")
    assert [r.node for r in got.rejections] == ["b", "a", "c", "d"]


def test_compute_shortage_is_named_as_such() -> None:
    c = cluster(a=[80])
    c.add_share("a-0", share("x", 10, 90))
    got = choose_card(c, Request(10, 20), Profile.COST_SAVING)
    assert isinstance(got, NoFit) and got.code == "insufficient-compute"


def test_requests_are_validated_with_units_in_the_message() -> None:
    assert validate_request(8, 30) == Request(8, 30)
    with pytest.raises(InvalidRequestError, match="250 %, but one card has 100 %"):
        validate_request(8, 250)
    with pytest.raises(InvalidRequestError, match="0 GiB; ask for at least 1 GiB"):
        validate_request(0, 30)
    with pytest.raises(InvalidRequestError, match="'fast' is unknown"):
        Profile.parse("fast")
    c = cluster(a=[80, 141])
    assert "largest card has 141 GiB" in (too_big(c, Request(200, 10)) or "")
    assert too_big(c, Request(141, 100)) is None


def test_vanished_card_keeps_its_shares_until_released() -> None:
    c = cluster(a=[80, 80])
    c.add_share("a-1", share("x", 10, 10))
    c.set_inventory("a", [Card("a", "a-0", 0, 80, 100)])
    state = c.card("a-1")
    assert state is not None and not state.card.healthy and "x" in state.shares
    assert c.remove_share("x") == "a-1" and c.card("a-1") is None


def _member(uid: str, mem: int) -> Workload:
    return Workload(WorkloadId(uid, uid, "default"), Request(mem, 50), Phase.PENDING,
                    "alnair-scheduler", 1, 0.0, pod_group="g")


def test_gang_plan_is_all_or_nothing_and_counts_planned_members() -> None:
    c = cluster(a=[80, 80], b=[80])
    members = [_member(f"m{i}", 50) for i in range(4)]
    short = plan_gang(c, members, lambda w: Profile.COST_SAVING)
    assert isinstance(short, GangShortfall) and (short.fitted, short.wanted) == (3, 4)
    assert all(not s.shares for s in c.cards())  # planning commits nothing
    plan = plan_gang(c, members[:3], lambda w: Profile.COST_SAVING)
    assert not isinstance(plan, GangShortfall)
    assert len({state.card.uuid for _, state in plan}) == 3
