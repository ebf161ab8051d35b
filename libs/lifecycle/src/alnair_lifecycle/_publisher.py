"""Publish each workload transition exactly once, across restarts and duplicate adapters.

A workload's phases are ordered, so a transition's ``sequence`` is its phase's rank
(pending 1, bound 2, running 3, succeeded/failed 4, deleted 5): it grows along the lifecycle
and is the same whoever publishes it. The message id ``<uid>:<phase>:<sequence>`` is thus
deterministic, and JetStream drops the second copy whether it comes from a restarted
adapter or from a second replica. The last event published per uid is kept in the
``workload_states`` bucket (compare-and-set), so an adapter that restarts after the
duplicate window still publishes only what is later in the lifecycle than that record.

A transition is not lost to a bus outage: :meth:`LifecyclePublisher.publish` retries until
JetStream has it (the message id makes every retry the same message). Across a restart of
the adapter the source of truth is the adapter's own (the local agent's workspaces with
their exit codes, the pods kube-bridge lists), from which it publishes again what is later
than the record.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, RevisionConflictError, TemporaryError, TypedKV, get_logger, subjects

from ._phases import is_after, phase_name, rank

BUCKET = subjects.WORKLOAD_STATES_BUCKET  # each workload's last event, keyed by statestate_key(uid)
log = get_logger("alnair.lifecycle")


class LifecyclePublisher:
    """Publishes WorkloadEvents for one adapter (``source``: "kube-bridge", "local-agent@h")."""

    def __init__(self, bus: Bus, kv: TypedKV[wl.WorkloadEvent], source: str) -> None:
        self.bus = bus
        self.kv = kv
        self.source = source

    @classmethod
    async def open(cls, bus: Bus, source: str) -> LifecyclePublisher:
        return cls(bus, await TypedKV.open(bus, BUCKET, wl.WorkloadEvent), source)

    async def last(self, uid: str) -> wl.WorkloadEvent | None:
        """The last event published for ``uid`` by any adapter, or None."""
        found = await self.kv.get(state_key(uid))
        return found.value if found else None

    async def states(self) -> list[wl.WorkloadEvent]:
        """Every workload's last event (for recovery after a restart, and `alnair ps`)."""
        events = []
        for key in await self.kv.keys():
            found = await self.kv.get(key)
            if found is not None:
                events.append(found.value)
        return events

    async def publish(self, workload: wl.Workload, *, observed_at: datetime | None = None) -> bool:
        """Publish ``workload``'s phase if it is news; return whether it was published.

        While the bus is away this waits (logging every try) until it is back: a terminal
        event must reach the scheduler, or the workload's share stays committed forever.
        """
        delay = 0.2
        while True:
            try:
                return await self._publish_once(workload, observed_at)
            except RevisionConflictError:
                raise
            except TemporaryError as e:
                log.warning("lifecycle event not yet published; retrying", uid=workload.ref.uid,
                            phase=phase_name(workload.phase), retry_in=delay, error=str(e))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _publish_once(self, workload: wl.Workload, observed_at: datetime | None) -> bool:
        uid = workload.ref.uid
        for _ in range(20):
            current = await self.kv.get(state_key(uid))
            last = current.value if current else None
            if last is not None and not is_after(workload.phase, last.workload.phase):
                return False
            event = wl.WorkloadEvent(source=self.source, sequence=rank(workload.phase))
            event.workload.CopyFrom(workload)
            event.workload.ClearField("environment")  # never leaves the submit message
            event.observed_at.FromDatetime(observed_at or datetime.now(UTC))
            msg_id = f"{uid}:{phase_name(workload.phase)}:{event.sequence}"
            await self.bus.publish(subjects.workload_events(), event, msg_id=msg_id)
            try:
                if current is None:
                    await self.kv.create(state_key(uid), event)
                else:
                    await self.kv.update(state_key(uid), event, current.revision)
            except RevisionConflictError:
                # Another adapter advanced the record meanwhile; re-read and decide again.
                log.info("lifecycle record raced", uid=uid, phase=phase_name(workload.phase))
                continue
            log.info("workload event", uid=uid, name=workload.ref.name,
                     phase=phase_name(workload.phase), sequence=event.sequence)
            return True
        return False

    async def forget(self, uid: str) -> None:
        """Drop the record of a workload, history and all (a deleted one, or a finished one
        past its retention)."""
        await self.kv.purge(state_key(uid))


def state_key(uid: str) -> str:
    """A workload's key in the bucket. KV keys allow ``[-/_=.a-zA-Z0-9]``; uids are UUIDs, but be safe."""
    return subjects.token(uid)
