"""One cycle's attempt at a PodGroup: wait for members, plan all-or-nothing, commit, report.

A group is *scheduled* once ``min_member`` of its members hold cards; later members are then
placed one by one like any workload. Until then the pending members are planned together
(all of them, or just the ``min_member`` still missing when not all fit) and committed only
if the whole plan fits; a commit that loses a race rolls back what this attempt committed.
A group still short of ``min_member`` after ``schedule_timeout_seconds`` fails, with the
reason on the group's status and on each member.

Starvation guard: a complete group that has not fitted for ``gang_reserve_after_seconds``
holds every later workload back (head-of-line), so a stream of small workloads cannot keep
taking the capacity it waits for — unless it could not fit even on an empty cluster, in
which case holding would only block everyone for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from ._cluster import Cluster
from ._domain import Card, Failure, Gang, Phase, Profile, Workload
from ._gang import GangShortfall, plan_gang
from ._outbox import Outbox
from ._utilisation import UtilisationTracker


class GangHost(Protocol):
    """What one gang attempt reads from the scheduler and commits through it.

    The model is only read here (cluster, workloads, groups); every change to it goes
    through the host's own operations, so the rules that keep model and KV in step (card
    locks, announce after commit) stay in one place. The attempt does change the group
    (phase, verdict, blocked-since): those are gang state, and the host keeps them across
    status echoes.
    """

    @property
    def cluster(self) -> Cluster: ...
    @property
    def workloads(self) -> Mapping[str, Workload]: ...
    @property
    def gangs(self) -> Mapping[str, Gang]: ...
    @property
    def util(self) -> UtilisationTracker: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def gang_reserve_after(self) -> float:
        """Seconds a complete group may stay blocked before it holds later workloads."""

    def profile_of(self, w: Workload) -> Profile: ...

    def preference(self, w: Workload) -> Mapping[str, float]:
        """Node → data-locality bonus for ``w`` (empty: no preference)."""

    async def check(self, w: Workload) -> Profile | None:
        """The member's profile, or None after the host rejected it for good."""

    async def place_one(self, w: Workload, pod_group: str = "") -> bool: ...

    async def commit(self, w: Workload, card: Card, profile: Profile, pod_group: str, *,
                     announce: bool = True) -> bool:
        """Commit one share (compare-and-set); False when it lost to another writer."""

    async def withdraw(self, uid: str) -> None:
        """Give back a share committed with ``announce=False`` and never announced."""

    async def announce(self) -> None:
        """Publish every committed placement not announced yet."""


def _members(host: GangHost, key: str) -> tuple[list[Workload], list[Workload]]:
    """(placed, pending) members of group ``key``."""
    placed, pending = [], []
    for w in host.workloads.values():
        if w.group_key != key:
            continue
        if host.cluster.is_placed(w.ref.uid) or w.phase is not Phase.PENDING:
            placed.append(w)
        else:
            pending.append(w)
    pending.sort(key=lambda w: (w.created_at, w.ref.uid))
    return placed, pending


async def _fail_all(host: GangHost, members: list[Workload], code: str, reason: str,
                    permanent: bool = False) -> None:
    for w in members:
        await host.outbox.fail(Failure(w.ref, code, reason, permanent=permanent))


async def place_gang(host: GangHost, key: str) -> bool:
    """One attempt; True when the group should hold later workloads back (see above)."""
    g = host.gangs.get(key)
    placed, pending = _members(host, key)
    if g is None:
        await _fail_all(host, pending, "pod-group-missing",
                        f"waiting for PodGroup {key}: members name it in their "
                        "alnair.centaurus.io/pod-group label, but no such PodGroup exists yet")
        return False
    if g.deleted:
        await _fail_all(host, pending, "pod-group-deleted", f"PodGroup {key} was deleted",
                        permanent=True)
        return False
    if g.failed_reason:
        return False
    need = max(0, g.min_member - len(placed))
    if need == 0:
        for w in pending:
            await host.place_one(w, g.name)
        await _status(host, g, "Scheduled", len(_members(host, key)[0]), "")
        return False
    now = host.clock()
    if g.timeout_seconds and now - g.created_at > g.timeout_seconds:
        reason = (f"PodGroup {key} timed out after {g.timeout_seconds} s with "
                  f"{len(placed)} of minMember {g.min_member} members placed")
        g.failed_reason = reason
        await _fail_all(host, pending, "gang-timeout", reason, permanent=True)
        await _status(host, g, "Failed", len(placed), reason)
        return False
    if len(pending) < need:
        reason = (f"PodGroup {key} needs {g.min_member} members placed together; "
                  f"{len(placed)} placed and {len(pending)} pending so far")
        await _fail_all(host, pending, "gang-incomplete", reason)
        await _status(host, g, "Pending", len(placed), reason)
        return False
    checked = []
    for w in pending:
        profile = await host.check(w)
        if profile is None:
            continue
        checked.append(w)
    if len(checked) < need:
        return False
    plan = plan_gang(host.cluster, checked, host.profile_of, host.util, host.preference)
    if isinstance(plan, GangShortfall) and len(checked) > need:
        plan = plan_gang(host.cluster, checked[:need], host.profile_of, host.util,
                         host.preference)
    if isinstance(plan, GangShortfall):
        reason = (f"PodGroup {key}: only {plan.fitted} of the {plan.wanted} members fit at once "
                  f"(all-or-nothing, nothing reserved); next member: {plan.blocker.summary}")
        await _fail_all(host, checked, "gang-unschedulable", reason)
        await _status(host, g, "Pending", len(placed), reason)
        if g.blocked_since is None:
            g.blocked_since = now
        return (host.gang_reserve_after > 0 and now - g.blocked_since >= host.gang_reserve_after
                and _fits_empty(host, checked[:need] if len(checked) > need else checked))
    committed: list[Workload] = []
    for w, state in plan:
        if not await host.commit(w, state.card, host.profile_of(w), g.name, announce=False):
            for done in committed:
                await host.withdraw(done.ref.uid)
            return False
        committed.append(w)
    await host.announce()
    g.blocked_since = None
    await _status(host, g, "Scheduled", len(placed) + len(committed), "")
    return False


def _fits_empty(host: GangHost, members: list[Workload]) -> bool:
    """Whether ``members`` would fit on the healthy cards with nothing committed."""
    empty = Cluster()
    for node, cards in host.cluster.nodes.items():
        empty.set_inventory(node, [s.card for s in cards.values()])
    return not isinstance(plan_gang(empty, members, host.profile_of, None), GangShortfall)


async def _status(host: GangHost, g: Gang, phase: str, scheduled: int, message: str) -> None:
    g.phase = phase
    await host.outbox.gang_status(g, scheduled, message)
