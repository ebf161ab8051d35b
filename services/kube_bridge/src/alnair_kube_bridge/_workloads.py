"""Pods → workload lifecycle events, complete and in order.

The bridge may miss steps: it was down, or a watch resumed after the pod had moved on. A
consumer should still see the whole lifecycle, so a transition that skips steps is
published with the steps the pod proves it went through (it has a node → it was bound; it
has a start time → it ran). A pod that vanished while nobody watched is found on the next
list (its record says it is not deleted, the API says it is gone) and published deleted.

Most watch events of a pod are no news (a status or annotation change within a phase), and
asking the record bucket for each costs round trips that a burst of pods waits on. So this
process keeps, per pod, the highest phase it knows is on record: phases only move forward,
so that is a lower bound of the bucket's however many bridges run, and an event at or
below it is dropped without asking. Anything newer still goes through the publisher's
compare-and-set, which has the last word.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import TemporaryError, get_logger
from alnair_lifecycle import LifecyclePublisher, Retention, forget_expired, observed_at, rank

from ._pods import is_alnair_pod, pod_phase, pod_workload
from ._watch import Changed, Synced

log = get_logger("alnair.kube-bridge.pods")
_STEPS = (wl.WORKLOAD_PHASE_PENDING, wl.WORKLOAD_PHASE_BOUND, wl.WORKLOAD_PHASE_RUNNING)


class PodLifecycle:
    """Publishes the lifecycle of Alnair's pods from list/watch events."""

    def __init__(self, lifecycle: LifecyclePublisher, *, scheduler_name: str,
                 namespace: str = "") -> None:
        self.lifecycle = lifecycle
        self.scheduler_name = scheduler_name
        self.namespace = namespace
        self._on_record: dict[str, int] = {}  # uid → rank known to be on record (at least)

    async def handle(self, item: Synced | Changed) -> None:
        if isinstance(item, Synced):
            await self._synced(item.items)
        else:
            await self._changed(item.type, item.obj)

    async def _changed(self, kind: str, pod: dict) -> None:
        if not is_alnair_pod(pod, self.scheduler_name):
            return
        uid = (pod.get("metadata") or {}).get("uid", "")
        if kind != "DELETED" and rank(pod_phase(pod)) <= self._on_record.get(uid, 0):
            return  # no news, and not worth converting
        if kind == "DELETED":  # the pod's last status first: it may have finished unseen
            await self.observe(pod_workload(pod))
        await self.observe(pod_workload(pod, deleted=kind == "DELETED"))

    async def _synced(self, pods: list[dict]) -> None:
        present: set[str] = set()
        for pod in pods:
            if is_alnair_pod(pod, self.scheduler_name):
                workload = pod_workload(pod)
                present.add(workload.ref.uid)
                await self.observe(workload)
        for last in await self.lifecycle.states():
            w = last.workload
            if (w.ref.mode != common_pb2.MODE_KUBERNETES or w.ref.uid in present
                    or w.phase == wl.WORKLOAD_PHASE_DELETED
                    or (self.namespace and w.ref.namespace != self.namespace)):
                continue
            gone = wl.Workload()
            gone.CopyFrom(w)
            gone.phase = wl.WORKLOAD_PHASE_DELETED
            gone.message = "pod deleted while kube-bridge was not watching"
            log.info("pod vanished between lists", uid=w.ref.uid, name=w.ref.name)
            await self.lifecycle.publish(gone)
            self._on_record.pop(w.ref.uid, None)

    async def observe(self, workload: wl.Workload) -> None:
        """Publish ``workload``'s phase, preceded by the steps it skipped since the last one."""
        uid, target = workload.ref.uid, rank(workload.phase)
        done = self._on_record.get(uid)
        if done is not None and target <= done:
            return  # no news: at least this far is on record already
        if done is None:
            # Pending is the first step, so nothing before it can have been skipped.
            last = await self.lifecycle.last(uid) if target > rank(_STEPS[0]) else None
            done = rank(last.workload.phase) if last else 0
        for step in _STEPS:
            if done < rank(step) < target and _went_through(workload, step):
                earlier = wl.Workload()
                earlier.CopyFrom(workload)
                earlier.phase = step
                earlier.ClearField("finished_at")
                earlier.ClearField("exit_code")
                if step == wl.WORKLOAD_PHASE_PENDING:
                    earlier.ClearField("node")
                    earlier.ClearField("started_at")
                elif step == wl.WORKLOAD_PHASE_BOUND:
                    earlier.ClearField("started_at")
                await self.lifecycle.publish(earlier)
        # Published now, or refused because the record was already there or later.
        await self.lifecycle.publish(workload)
        if workload.phase == wl.WORKLOAD_PHASE_DELETED:
            self._on_record.pop(uid, None)  # the last step; a replay asks the bucket
        else:
            self._on_record[uid] = max(target, self._on_record.get(uid, 0))


def _went_through(workload: wl.Workload, step: int) -> bool:
    if step == wl.WORKLOAD_PHASE_PENDING:
        return True
    if step == wl.WORKLOAD_PHASE_BOUND:
        return bool(workload.node)
    return workload.HasField("started_at")


def _deleted_pod(event: wl.WorkloadEvent) -> bool:
    return (event.workload.ref.mode == common_pb2.MODE_KUBERNETES
            and event.workload.phase == wl.WORKLOAD_PHASE_DELETED)


async def forget_deleted(lifecycle: LifecyclePublisher, retention_seconds: float,
                         now: datetime) -> int:
    """One round: forget the records of pods deleted more than ``retention_seconds`` ago,
    counted from the deletion (the DELETED event), not from when the pod finished."""
    return await forget_expired(lifecycle, _deleted_pod, Retention(retention_seconds, keep=1 << 62),
                                now, since=observed_at)


async def forget_deleted_pods(lifecycle: LifecyclePublisher, retention_seconds: float,
                              every_seconds: float) -> None:
    """:func:`forget_deleted` every ``every_seconds`` (every bridge may: a purge is
    idempotent); a round that fails is tried again on the next."""
    while True:
        try:
            await forget_deleted(lifecycle, retention_seconds, datetime.now(UTC))
        except TemporaryError as e:
            log.info("retention round skipped", error=str(e))
        await asyncio.sleep(every_seconds)
