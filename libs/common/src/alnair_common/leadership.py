"""One leader among a service's replicas, by a lease in the ``leases`` bucket.

Two replicas of the scheduler (or of kube-bridge) would both place (or both bind): one must
act, the other stand by and take over within seconds when the first dies. The lease is a
KV record under the service's name, written by compare-and-set:

* the holder renews it every ``ttl / 3``; a renewal that loses the race (another replica took
  it) or that cannot be made for ``ttl`` (the bus away) ends the leadership, and the service
  stops (its supervisor starts it again, as a standby);
* a standby watches the record's *revision*: once it has seen no new revision for ``ttl`` by
  its own monotonic clock, it takes the lease over with a compare-and-set at the revision it
  saw. No two machines' clocks are ever compared, so clock skew cannot elect two leaders;
  a paused leader that wakes up finds its renewal refused.

Why a bus lease and not the Kubernetes Lease API: the scheduler is a brain and never talks to
Kubernetes, the local platform has no Kubernetes at all, and one mechanism serves both
services in both modes. The bound on a stale leader acting is the renewal period: a leader
that cannot renew stops acting after ``ttl``, before a standby takes over (it waits ``ttl``
from the last revision it saw, which is no earlier than the leader's last renewal).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from alnair.v1 import platform_pb2

from . import subjects
from .bus import Bus, TypedKV
from .errors import RevisionConflictError, TemporaryError
from .logs import get_logger

BUCKET = subjects.LEASES_BUCKET
RELEASE_SECONDS = 2.0  # handing the lease back at a stop: at most this long
log = get_logger("alnair.leadership")


@dataclass
class Leadership:
    """This instance's lease on ``name``, once :meth:`acquire` returned."""

    kv: TypedKV[platform_pb2.Lease]
    name: str
    holder: str
    ttl: float
    revision: int = 0
    term: int = 0
    clock: Callable[[], float] = time.monotonic

    @classmethod
    async def acquire(cls, bus: Bus, name: str, holder: str, *, ttl: float = 10.0,
                      on_standby: Callable[[str], None] = lambda _: None,
                      clock: Callable[[], float] = time.monotonic) -> Leadership:
        """Wait until this instance holds the lease; ``on_standby(holder)`` says who has it."""
        kv = await TypedKV.open(bus, BUCKET, platform_pb2.Lease)
        me = cls(kv, name, holder, ttl, clock=clock)
        seen_revision, seen_at = -1, clock()
        while True:
            current = await kv.get(name)
            if current is None:
                if await me._take(None):
                    return me
                continue
            if current.revision != seen_revision:
                seen_revision, seen_at = current.revision, clock()
                if current.value.holder != holder:
                    on_standby(current.value.holder)
            if current.value.holder == holder or clock() - seen_at >= current.value.ttl_seconds:
                # Ours from before a restart, or nobody renewed it for a whole ttl.
                if await me._take(current.revision, term=current.value.term):
                    return me
                continue
            await asyncio.sleep(min(ttl, current.value.ttl_seconds) / 6)

    async def _take(self, revision: int | None, *, term: int = 0) -> bool:
        lease = self._lease(term + 1)
        try:
            if revision is None:
                self.revision = await self.kv.create(self.name, lease)
            else:
                self.revision = await self.kv.update(self.name, lease, revision)
        except RevisionConflictError:
            return False  # someone else was faster; look again
        self.term = lease.term
        log.info("leader", lease=self.name, holder=self.holder, term=self.term)
        return True

    def _lease(self, term: int) -> platform_pb2.Lease:
        lease = platform_pb2.Lease(holder=self.holder, term=term, ttl_seconds=self.ttl)
        lease.renewed_at.GetCurrentTime()
        return lease

    async def keep(self) -> str:
        """Renew until the lease is lost; return why (the caller stops acting then)."""
        last_renewal = self.clock()
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                self.revision = await self.kv.update(self.name, self._lease(self.term), self.revision)
                last_renewal = self.clock()
            except RevisionConflictError:
                return f"lease {self.name!r} taken over by another instance"
            except TemporaryError as e:
                if self.clock() - last_renewal >= self.ttl:
                    return f"lease {self.name!r} not renewed for {self.ttl:g} s: {e}"
                log.info("lease renewal failed; retrying", lease=self.name, error=str(e))

    async def release(self) -> None:
        """Hand the lease back at a clean stop, so a standby takes over at once. Bounded: a
        stop because the bus went away must not wait for it (the lease then expires)."""
        with contextlib.suppress(TemporaryError, RevisionConflictError, TimeoutError):
            await asyncio.wait_for(self.kv.delete(self.name, revision=self.revision), RELEASE_SECONDS)
