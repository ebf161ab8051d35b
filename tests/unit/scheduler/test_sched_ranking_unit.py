"""The ranked search (cached node summaries, early stop) picks exactly the card that the
full scan of every card picks, on random clusters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from alnair_scheduler._cluster import Cluster
from alnair_scheduler._domain import Card, Profile, Request, Share, WorkloadId
from alnair_scheduler._placement import NoFit, choose_card

cards = st.lists(st.tuples(st.sampled_from([24, 48, 80]), st.booleans()), min_size=1, max_size=4)
usage = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 12), st.integers(1, 60)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(cards, min_size=1, max_size=6), usage, st.integers(1, 80), st.integers(1, 100),
       st.sampled_from([Profile.COST_SAVING, Profile.HIGH_PERFORMANCE]))
def test_ranked_search_equals_full_scan(nodes, shares, mem, comp, profile) -> None:
    c = Cluster()
    uuids = []
    for n, node_cards in enumerate(nodes):
        node = f"n{n}"
        c.set_inventory(node, [Card(node, f"{node}-{i}", i, m, 100, healthy)
                               for i, (m, healthy) in enumerate(node_cards)])
        uuids += [f"{node}-{i}" for i in range(len(node_cards))]
    for k, (target, m, p) in enumerate(shares):
        state = c.card(uuids[target % len(uuids)])
        assert state is not None
        if state.free_memory >= m and state.free_compute >= p:
            c.add_share(state.card.uuid, Share(WorkloadId(f"w{k}", f"w{k}", "d"), m, p))
    ranked = choose_card(c, Request(mem, comp), profile)
    full = choose_card(c, Request(mem, comp), profile, overlay={"no-such-card": (0, 0)})
    if isinstance(full, NoFit):
        assert isinstance(ranked, NoFit) and ranked.summary == full.summary
    else:
        assert not isinstance(ranked, NoFit) and ranked.card.uuid == full.card.uuid
