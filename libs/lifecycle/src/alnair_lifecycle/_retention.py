"""Forgetting finished workloads: the rule both adapters apply to the records they keep.

Every workload leaves a ``workload_states`` record; kept forever, listings (`alnair ps`) and
recoveries read every workload that ever ran. An adapter forgets the records it owns once
they are past a retention: the local agent a finished local workload (and its workspace),
kube-bridge a deleted pod — not at once, since a watch that resumes from an older version
may replay the pod's earlier events, and the record is what makes those no news.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from alnair.v1 import workload_pb2 as wl
from alnair_common import get_logger

from ._publisher import LifecyclePublisher

log = get_logger("alnair.lifecycle.retention")


@dataclass(frozen=True)
class Retention:
    """Keep an ended workload ``retention_seconds`` after it ended, at most ``keep`` of them."""

    retention_seconds: float
    keep: int


def ended_at(event: wl.WorkloadEvent) -> datetime:
    w = event.workload
    stamp = w.finished_at if w.HasField("finished_at") else event.observed_at
    return stamp.ToDatetime(tzinfo=UTC)


def observed_at(event: wl.WorkloadEvent) -> datetime:
    return event.observed_at.ToDatetime(tzinfo=UTC)


Since = Callable[[wl.WorkloadEvent], datetime]


def expired(events: list[wl.WorkloadEvent], policy: Retention, now: datetime,
            since: Since = ended_at) -> list[wl.WorkloadEvent]:
    """Of ``events`` (all ended), those past ``policy`` counted from ``since``: too old, or
    beyond the newest ``keep``."""
    newest_first = sorted(events, key=since, reverse=True)
    return [e for i, e in enumerate(newest_first)
            if i >= policy.keep or (now - since(e)).total_seconds() > policy.retention_seconds]


async def forget_expired(lifecycle: LifecyclePublisher, ended: Callable[[wl.WorkloadEvent], bool],
                         policy: Retention, now: datetime,
                         on_forget: Callable[[str], Awaitable[None]] | None = None,
                         since: Since = ended_at) -> int:
    """Purge the records ``ended`` selects that are past ``policy``; ``on_forget(uid)`` after
    each (e.g. remove its workspace). Returns how many were forgotten."""
    mine = [e for e in await lifecycle.states() if ended(e)]
    gone = expired(mine, policy, now, since)
    for event in gone:
        await lifecycle.forget(event.workload.ref.uid)
        if on_forget is not None:
            await on_forget(event.workload.ref.uid)
    if gone:
        log.info("ended workloads forgotten", source=lifecycle.source, count=len(gone),
                 kept=len(mine) - len(gone))
    return len(gone)
