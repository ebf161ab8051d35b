"""Everything the scheduler tells the world, published on the bus.

Failures are published when their reason changes, not on every attempt, and a reason whose
code is unchanged (only the free GiB it quotes moved) is refreshed at most every
``refresh_seconds``: a workload that waits an hour for capacity produces a few dozen events,
not one per cycle, and a thousand waiting gang members do not flood the bus each time a
card frees up. Each cycle may also publish at most ``per_cycle`` new reasons: the rest are
published by the next cycles, so a cycle stays short when thousands wait at once (reasons
already said cost nothing, so the budget reaches the back of the queue). Bind decisions
carry a message id derived from workload and card, so a decision re-announced after a
restart is stored once by JetStream's de-duplication.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from alnair_common import Bus, get_logger, subjects

from . import _convert, _metrics
from ._domain import Assignment, Failure, Gang, WorkloadId

log = get_logger("alnair.scheduler")


class Outbox:
    def __init__(self, bus: Bus, instance: str, clock: Callable[[], float] = time.time,
                 refresh_seconds: float = 5.0, per_cycle: int = 200) -> None:
        self.bus = bus
        self.instance = instance
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self._reported: dict[str, tuple[str, str, float]] = {}
        self.per_cycle = per_cycle
        self._budget = per_cycle

    def new_cycle(self) -> None:
        self._budget = self.per_cycle

    async def bind(self, w: WorkloadId, a: Assignment, pod_group: str) -> None:
        msg = _convert.bind_decision(w, a, pod_group, self.instance, self.clock())
        await self.bus.publish(subjects.sched_bind(), msg, msg_id=f"bind-{w.uid}-{a.gpu_uuid}")
        self._reported.pop(w.uid, None)
        _metrics.DECISIONS.labels("bound").inc()
        log.info("placed", workload=str(w), uid=w.uid, node=a.node, gpu=a.gpu_index,
                 memory_gib=a.memory_gib, compute_percent=a.compute_percent,
                 profile=a.profile.value, pod_group=pod_group or None, why=a.reason or None)

    async def fail(self, f: Failure) -> bool:
        """Publish why ``f.workload`` stays pending; False when that was already said."""
        now = self.clock()
        last = self._reported.get(f.workload.uid)
        if last is not None and last[0] == f.code and (
                last[1] == f.reason or now - last[2] < self.refresh_seconds):
            return False
        if not f.permanent:  # a permanent reason is said once and at once: nothing retries it
            if self._budget <= 0:
                return False  # said by a later cycle
            self._budget -= 1
        await self.bus.publish(subjects.sched_failed(), _convert.scheduling_failure(f, now))
        await self.bus.publish(subjects.cmd_event(), _convert.failed_event(f, now))
        self._reported[f.workload.uid] = (f.code, f.reason, now)
        _metrics.DECISIONS.labels("permanent-failure" if f.permanent else "pending").inc()
        log.info("not placed", workload=str(f.workload), uid=f.workload.uid, code=f.code,
                 reason=f.reason, permanent=f.permanent)
        return True

    def forget(self, uid: str) -> None:
        self._reported.pop(uid, None)

    async def gang_status(self, g: Gang, scheduled: int, message: str) -> None:
        state = (g.phase, scheduled, message)
        if g.last_status == state:
            return
        await self.bus.publish(subjects.cmd_status(), _convert.gang_status(g, scheduled, message))
        g.last_status = state
        log.info("pod group status", pod_group=g.key, phase=g.phase, scheduled=scheduled,
                 message=message)
