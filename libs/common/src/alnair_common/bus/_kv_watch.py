"""Following a KV bucket: its current values first, then every change, typed.

A service that keeps a copy of shared state (the scheduler's node inventories) reads what the
bucket holds now and then each put and delete as it happens, from one ordered watch, so no
change between "read all" and "start watching" can be missed. The client marks the end of the
current values; :meth:`KVWatch.caught_up` turns that marker into a signal: the iteration has
taken every current value (and so has handled them: it asked for the next one). The marker
alone is not enough: nats-py decides it from the consumer's pending count, which reads 0 once
the server has sent the last value, even while that value is still on its way to the client
(CI: a value put just before ``TypedKV.current()`` missing from its answer). A watch of the
whole bucket therefore also waits for the newest revision the bucket held when it started.

Keys deleted before the watch started are not reported (they have no current value); a
delete while watching is, as an update whose ``value`` is None. A value that does not decode
is logged and counted (``alnair_bus_decode_errors_total``) and skipped, so one bad writer
cannot stop the watch — the key keeps its last good value for the watcher.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Generic, TypeVar

import nats.errors
import nats.js.errors
from google.protobuf.message import Message
from nats.js.kv import KeyValue

from ..errors import DecodeError
from ..logs import get_logger
from . import _metrics
from ._catch_up import CatchUp
from ._codec import decode

M = TypeVar("M", bound=Message)
DELETE_SECONDS = 1.0
log = get_logger("alnair.bus")
_REMOVED = ("DEL", "PURGE")


@dataclass(frozen=True)
class KVUpdate(Generic[M]):
    """One key's new state; ``value`` None: the key was deleted or purged."""

    key: str
    value: M | None
    revision: int

    @property
    def deleted(self) -> bool:
        return self.value is None


class KVWatch(Generic[M]):
    """An async iterator of :class:`KVUpdate`; made by :meth:`TypedKV.watch`."""

    def __init__(self, watcher: KeyValue.KeyWatcher, bucket: str, message_type: type[M],
                 service: str, *, target: int = 0) -> None:
        """``target``: the revision to have taken before caught up (0: the marker decides)."""
        self._watcher = watcher
        self.bucket = bucket
        self.message_type = message_type
        self._service = service
        self._catch_up = CatchUp(f"watch of bucket {bucket!r}",
                                 until="waiting for the iteration to take every current value")
        self._catch_up.target = target or None
        self._marker = False

    def __aiter__(self) -> KVWatch[M]:
        return self

    async def __anext__(self) -> KVUpdate[M]:
        while True:
            self._reached_if_done()  # asked for the next: what came before is handled
            entry = await self._watcher.__anext__()  # StopAsyncIteration once stopped
            if entry is None:
                self._marker = True
                continue
            update = self._typed(entry)
            if update is not None:
                return update

    def _reached_if_done(self) -> None:
        target = self._catch_up.target
        if self._marker and (target is None or self._catch_up.highest >= target):
            self._catch_up.reached()

    @property
    def is_caught_up(self) -> bool:
        return self._catch_up.done.is_set()

    async def caught_up(self, timeout: float) -> None:
        """Return once the iteration has taken every value the bucket held at start; raise
        :class:`NotCaughtUpError` after ``timeout`` seconds (nobody iterating, or slowly)."""
        await self._catch_up.wait(timeout)

    async def stop(self) -> None:
        """End the iteration and delete the watch's consumer on the server.

        Unsubscribing alone leaves an ephemeral consumer there until its inactivity threshold
        (5 minutes in nats-py): a reader polling a bucket (``alnair job ls`` in a loop, a
        benchmark) then piles them up until the server refuses new ones ("maximum consumers
        limit reached"). nats-py keeps the consumer's name on the subscription only (no
        public accessor): read there, and a failed delete is only logged."""
        sub = getattr(self._watcher, "_sub", None)
        js, stream, consumer = (getattr(sub, a, None) for a in ("_js", "_stream", "_consumer"))
        try:
            await self._watcher.stop()
        except nats.errors.Error as e:
            log.info("watch already gone", bucket=self.bucket, error=repr(e))
        connection = getattr(js, "_nc", None)
        if js is None or not stream or not consumer or not getattr(connection, "is_connected", False):
            return  # the bus is away (a stop during an outage): the server forgets it in 5 min
        try:
            # Bounded: a stopping service must not wait on a bus that went away meanwhile.
            await asyncio.wait_for(js.delete_consumer(stream, consumer), DELETE_SECONDS)
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
            log.info("watch consumer not deleted", bucket=self.bucket, error=repr(e))

    def _typed(self, entry: KeyValue.Entry) -> KVUpdate[M] | None:
        revision = entry.revision or 0
        self._catch_up.settled(revision)
        if entry.operation in _REMOVED or entry.value is None:
            if not self.is_caught_up:
                return None  # deleted before we looked: nothing current to report
            return KVUpdate(entry.key, None, revision)
        try:
            value = decode(f"$KV.{self.bucket}.{entry.key}", entry.value, self.message_type)
        except DecodeError as e:
            _metrics.counter(_metrics.DECODE_ERRORS, self._service, f"$KV.{self.bucket}.>").inc()
            log.warning("malformed value skipped", bucket=self.bucket, key=entry.key,
                        revision=revision, error=str(e))
            return None
        return KVUpdate(entry.key, value, revision)
