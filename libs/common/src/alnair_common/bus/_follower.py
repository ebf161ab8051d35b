"""A read-only view of a stream: its whole history on every start, then live messages.

For a service that derives what it knows from a stream and needs no acknowledgement (the
exporter learns which workload is which from the workload events). It is an *ordered*
consumer — ephemeral, nothing kept on the server, so a node that goes away leaves no
durable behind — which the client re-creates from the next sequence after a gap, so each
message reaches the handler once per process, in stream order.

A payload that does not decode is counted like any other bus message and dropped: handed to
``on_malformed`` if given (a service that counts and logs its own dropped messages), logged
otherwise. A handler that raises is logged and counted and the view goes on. Neither is
retried: there is no ack.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import nats.errors
from google.protobuf.message import Message
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from ..errors import BusUnavailableError, DecodeError
from ..logs import get_logger
from . import _metrics
from ._catch_up import CatchUp, last_sequence
from ._client import Bus
from ._codec import decode

M = TypeVar("M", bound=Message)
log = get_logger("alnair.bus")


class StreamFollower(Generic[M]):
    """Every message of ``subject`` in ``stream`` from its first, then live, to ``handler``."""

    def __init__(
        self,
        bus: Bus,
        *,
        stream: str,
        subject: str,
        message_type: type[M],
        handler: Callable[[str, M], Awaitable[None]],
        on_malformed: Callable[[str, DecodeError], None] | None = None,
    ) -> None:
        self.bus = bus
        self.stream = stream
        self.subject = subject
        self.message_type = message_type
        self.handler = handler
        self.on_malformed = on_malformed
        self._catch_up = CatchUp(f"follower of {subject!r} in stream {stream!r}")
        self._sub: Any = None
        self._target_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._sub = await self.bus.js.subscribe(
            self.subject, stream=self.stream, cb=self._on_msg, ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        self._target_task = asyncio.create_task(self._read_target(),
                                                name=f"catch-up:{self.subject}")

    async def stop(self) -> None:
        if self._target_task is not None:
            self._target_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._target_task
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()

    @property
    def is_caught_up(self) -> bool:
        return self._catch_up.done.is_set()

    async def caught_up(self, timeout: float) -> None:
        """Return once the message that was last in the stream at start has been handled;
        raise :class:`NotCaughtUpError`, with the progress made, after ``timeout`` seconds."""
        await self._catch_up.wait(timeout)

    async def _read_target(self) -> None:
        """Retried while the server is away: a follower may start before it is back, and
        only says it caught up once it knows what there was to catch up with."""
        progress = self._catch_up
        while progress.target is None:
            try:
                progress.target = await last_sequence(self.bus, self.stream, self.subject)
            except BusUnavailableError as e:
                log.info("catch-up target unknown, retrying", subject=self.subject, error=str(e))
                await asyncio.sleep(0.5)
        if progress.highest >= progress.target:
            progress.reached()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            await self._handle(msg)
        finally:
            self._settled(msg.metadata.sequence.stream)

    async def _handle(self, msg: Msg) -> None:
        pattern = _metrics.pattern_of(msg.subject)
        service = self.bus.service
        try:
            decoded = decode(msg.subject, msg.data, self.message_type)
        except DecodeError as e:
            _metrics.counter(_metrics.DECODE_ERRORS, service, pattern).inc()
            if self.on_malformed is not None:
                self.on_malformed(msg.subject, e)
            else:
                log.warning("malformed message dropped", subject=msg.subject, error=str(e))
            return
        _metrics.counter(_metrics.RECEIVED, service, pattern).inc()
        try:
            await self.handler(msg.subject, decoded)
        except Exception as e:  # noqa: BLE001 - one bad message must not end the view
            _metrics.counter(_metrics.HANDLER_ERRORS, service, pattern, "dropped").inc()
            log.exception("handler failed", subject=msg.subject, error=str(e))

    def _settled(self, sequence: int) -> None:
        progress = self._catch_up
        progress.settled(sequence)
        if progress.target is not None and sequence >= progress.target:
            progress.reached()
