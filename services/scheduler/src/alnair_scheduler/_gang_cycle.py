"""One cycle's attempt at a PodGroup: wait for members, plan all-or-nothing, commit, report.

A group is *scheduled* once ``min_member`` of its members hold cards; later members are then
placed one by one like any workload. Until then the pending members are planned together
(all of them, or just the ``min_member`` still missing when not all fit) and committed only
if the whole plan fits; a commit that loses a race rolls back what this attempt committed.
A group still short of ``min_member`` after ``schedule_timeout_seconds`` fails, with the
reason on the group's status and on each member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


async def place_gang(engine: Engine, key: str) -> None:
    g = engine.gangs.get(key)
    placed, pending = _members(engine, key)
    if g is None:
        await _fail_all(engine, pending, "pod-group-missing",
                        f"waiting for PodGroup {key}: members name it in their "
                        "alnair.centaurus.io/pod-group label, but no such PodGroup exists yet")
        return
    if g.deleted:
        await _fail_all(engine, pending, "pod-group-deleted", f"PodGroup {key} was deleted",
                        permanent=True)
        return
    if g.failed_reason:
        return
    need = max(0, g.min_member - len(placed))
    if need == 0:
        for w in pending:
            await engine.place_one(w, g.name)
        await _status(engine, g, "Scheduled", len(_members(engine, key)[0]), "")
        return
    now = engine.clock()
    if g.timeout_seconds and now - g.created_at > g.timeout_seconds:
        reason = (f"PodGroup {key} timed out after {g.timeout_seconds} s with "
                  f"{len(placed)} of minMember {g.min_member} members placed")
        g.failed_reason = reason
        await _fail_all(engine, pending, "gang-timeout", reason, permanent=True)
        await _status(engine, g, "Failed", len(placed), reason)
        return
    if len(pending) < need:
        reason = (f"PodGroup {key} needs {g.min_member} members placed together; "
                  f"{len(placed)} placed and {len(pending)} pending so far")
        await _fail_all(engine, pending, "gang-incomplete", reason)
        await _status(engine, g, "Pending", len(placed), reason)
        return
    checked = []
    for w in pending:
        profile = await engine.check(w)
        if profile is None:
            continue
        checked.append(w)
    if len(checked) < need:
        return
    plan = plan_gang(engine.cluster, checked, engine.profile_of, engine.util)
    if isinstance(plan, GangShortfall) and len(checked) > need:
        plan = plan_gang(engine.cluster, checked[:need], engine.profile_of, engine.util)
    if isinstance(plan, GangShortfall):
        reason = (f"PodGroup {key}: only {plan.fitted} of the {plan.wanted} members fit at once "
                  f"(all-or-nothing, nothing reserved); next member: {plan.blocker.summary}")
        await _fail_all(engine, checked, "gang-unschedulable", reason)
        await _status(engine, g, "Pending", len(placed), reason)
        return
    committed: list[Workload] = []
    for w, state in plan:
        if not await engine.commit(w, state.card, engine.profile_of(w), g.name, announce=False):
            for done in committed:
                engine.unannounced.pop(done.ref.uid, None)
                await engine.release(done.ref.uid, "")
            return
        committed.append(w)
    await engine.announce()
    await _status(engine, g, "Scheduled", len(placed) + len(committed), "")


async def _status(engine: Engine, g: Gang, phase: str, scheduled: int, message: str) -> None:
    g.phase = phase
    await engine.outbox.gang_status(g, scheduled, message)
