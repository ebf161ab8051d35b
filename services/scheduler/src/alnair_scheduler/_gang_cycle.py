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

from typing import TYPE_CHECKING

from ._cluster import Cluster
from ._domain import Failure, Gang, Phase, Workload
from ._gang import GangShortfall, plan_gang

if TYPE_CHECKING:
    from ._engine import Engine


def _members(engine: Engine, key: str) -> tuple[list[Workload], list[Workload]]:
    """(placed, pending) members of group ``key``."""
    placed, pending = [], []
    for w in engine.workloads.values():
        if w.group_key != key:
            continue
        if engine.cluster.is_placed(w.ref.uid) or w.phase is not Phase.PENDING:
            placed.append(w)
        else:
            pending.append(w)
    pending.sort(key=lambda w: (w.created_at, w.ref.uid))
    return placed, pending


async def _fail_all(engine: Engine, members: list[Workload], code: str, reason: str,
                    permanent: bool = False) -> None:
    for w in members:
        await engine.outbox.fail(Failure(w.ref, code, reason, permanent=permanent))


async def place_gang(engine: Engine, key: str) -> bool:
    """One attempt; True when the group should hold later workloads back (see above)."""
    g = engine.gangs.get(key)
    placed, pending = _members(engine, key)
    if g is None:
        await _fail_all(engine, pending, "pod-group-missing",
                        f"waiting for PodGroup {key}: members name it in their "
                        "alnair.centaurus.io/pod-group label, but no such PodGroup exists yet")
        return False
    if g.deleted:
        await _fail_all(engine, pending, "pod-group-deleted", f"PodGroup {key} was deleted",
                        permanent=True)
        return False
    if g.failed_reason:
        return False
    need = max(0, g.min_member - len(placed))
    if need == 0:
        for w in pending:
            await engine.place_one(w, g.name)
        await _status(engine, g, "Scheduled", len(_members(engine, key)[0]), "")
        return False
    now = engine.clock()
    if g.timeout_seconds and now - g.created_at > g.timeout_seconds:
        reason = (f"PodGroup {key} timed out after {g.timeout_seconds} s with "
                  f"{len(placed)} of minMember {g.min_member} members placed")
        g.failed_reason = reason
        await _fail_all(engine, pending, "gang-timeout", reason, permanent=True)
        await _status(engine, g, "Failed", len(placed), reason)
        return False
    if len(pending) < need:
        reason = (f"PodGroup {key} needs {g.min_member} members placed together; "
                  f"{len(placed)} placed and {len(pending)} pending so far")
        await _fail_all(engine, pending, "gang-incomplete", reason)
        await _status(engine, g, "Pending", len(placed), reason)
        return False
    checked = []
    for w in pending:
        profile = await engine.check(w)
        if profile is None:
            continue
        checked.append(w)
    if len(checked) < need:
        return False
    plan = plan_gang(engine.cluster, checked, engine.profile_of, engine.util)
    if isinstance(plan, GangShortfall) and len(checked) > need:
        plan = plan_gang(engine.cluster, checked[:need], engine.profile_of, engine.util)
    if isinstance(plan, GangShortfall):
        reason = (f"PodGroup {key}: only {plan.fitted} of the {plan.wanted} members fit at once "
                  f"(all-or-nothing, nothing reserved); next member: {plan.blocker.summary}")
        await _fail_all(engine, checked, "gang-unschedulable", reason)
        await _status(engine, g, "Pending", len(placed), reason)
        if g.blocked_since is None:
            g.blocked_since = now
        return (engine.gang_reserve_after > 0 and now - g.blocked_since >= engine.gang_reserve_after
                and _fits_empty(engine, checked[:need] if len(checked) > need else checked))
    committed: list[Workload] = []
    for w, state in plan:
        if not await engine.commit(w, state.card, engine.profile_of(w), g.name, announce=False):
            for done in committed:
                engine.unannounced.pop(done.ref.uid, None)
                await engine.release(done.ref.uid, "")
            return False
        committed.append(w)
    await engine.announce()
    g.blocked_since = None
    await _status(engine, g, "Scheduled", len(placed) + len(committed), "")
    return False


def _fits_empty(engine: Engine, members: list[Workload]) -> bool:
    """Whether ``members`` would fit on the healthy cards with nothing committed."""
    empty = Cluster()
    for node, cards in engine.cluster.nodes.items():
        empty.set_inventory(node, [s.card for s in cards.values()])
    return not isinstance(plan_gang(empty, members, engine.profile_of, None), GangShortfall)


async def _status(engine: Engine, g: Gang, phase: str, scheduled: int, message: str) -> None:
    g.phase = phase
    await engine.outbox.gang_status(g, scheduled, message)
