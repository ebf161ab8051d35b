"""Gang planning: place a PodGroup's members all at once or not at all.

The plan is made against the committed shares plus an overlay of the members planned so
far, and nothing is committed unless every member found a card. So a group never holds part
of the cluster while it waits for the rest: two groups that each need most of the cluster
cannot each reserve half and wait forever (the deadlock of plugin-based co-scheduling).
Members are planned largest first, which packs a gang into fewer, fuller cards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._cluster import CardState, Cluster
from ._domain import Profile, Request, Workload
from ._placement import NoFit, Overlay, choose_card
from ._utilisation import UtilisationTracker


@dataclass(frozen=True)
class GangShortfall:
    """How many members fitted before one did not, and why that one did not."""

    fitted: int
    wanted: int
    blocker: NoFit


def plan_gang(cluster: Cluster, members: list[Workload], profile_of: Callable[[Workload], Profile],
              util: UtilisationTracker | None = None,
              prefer_of: Callable[[Workload], Mapping[str, float]] | None = None,
              ) -> list[tuple[Workload, CardState]] | GangShortfall:
    """A card for every member, or the shortfall; the cluster is not changed. ``prefer_of``
    gives a member's data-locality bonus per node (see ``_placement``)."""
    overlay: Overlay = {}
    plan: list[tuple[Workload, CardState]] = []

    def size(w: Workload) -> tuple[int, int, float, str]:
        r = w.request or Request(0, 0)
        return (-r.memory_gib, -r.compute_percent, w.created_at, w.ref.uid)

    for w in sorted(members, key=size):
        assert w.request is not None, "members with invalid requests are rejected before planning"
        prefer = prefer_of(w) if prefer_of is not None else None
        choice = choose_card(cluster, w.request, profile_of(w), util, overlay, prefer)
        if isinstance(choice, NoFit):
            return GangShortfall(len(plan), len(members), choice)
        m, c = overlay.get(choice.card.uuid, (0, 0))
        overlay[choice.card.uuid] = (m + w.request.memory_gib, c + w.request.compute_percent)
        plan.append((w, choice))
    return plan
