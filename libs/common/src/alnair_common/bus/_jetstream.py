"""Durable delivery: pull consumers with explicit acknowledgement.

A :class:`DurableConsumer` hands each message to its handler and settles it by the outcome:
success → ``ack`` (acknowledged synchronously, so a restart never redelivers a message whose
handler completed); :class:`TemporaryError` → ``nak(retry_after)``; :class:`PermanentError`
or a payload that does not decode → ``term()`` with the reason logged, counted and published
as an ErrorEvent. Any other exception is treated as temporary, so a bug retries up to
``max_deliver`` times instead of silently dropping the record.

Exactly once: when the handler completed but its ack was lost (the server went away in
between), JetStream redelivers the message. The consumer remembers the stream sequences it
handled but could not ack, and acks their redelivery without running the handler again.
Across a restart of the consuming *process* that memory is gone, so handlers that must not
double-apply are idempotent as well (events carry sequence numbers for that).

Replay, then live: :meth:`DurableConsumer.caught_up` says when the backlog that existed at
start is settled (see ``_catch_up``); ``from_start=True`` drops the position the durable kept
and reads the whole stream again, for a service that rebuilds an in-memory model on each start.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import nats.errors
import nats.js.errors
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from alnair.v1 import platform_pb2

from .. import subjects
from ..errors import AlnairError, BusUnavailableError, DecodeError, PermanentError, TemporaryError
from ..logs import get_logger
from . import _metrics
from ._catch_up import CatchUp, last_sequence
from ._client import Bus
from ._codec import decode

M = TypeVar("M", bound=Message)
log = get_logger("alnair.bus")


class DurableConsumer:
    """A durable pull consumer running ``handler`` on each message of ``subject``."""

    def __init__(
        self,
        bus: Bus,
        *,
        stream: str,
        durable: str,
        subject: str,
        message_type: type[M],
        handler: Callable[[str, M], Awaitable[None]],
        max_deliver: int = 10,
        ack_wait: float = 30.0,
        batch: int = 64,
        fetch_timeout: float = 1.0,
        concurrency: int = 1,
        from_start: bool = False,
        start_time: datetime | None = None,
    ) -> None:
        self.bus = bus
        self.stream = stream
        self.durable = durable
        self.subject = subject
        self.message_type = message_type
        self.handler = handler
        self.config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL if start_time is None else DeliverPolicy.BY_START_TIME,
            opt_start_time=None if start_time is None else start_time.astimezone(UTC),
            max_deliver=max_deliver,
            ack_wait=ack_wait,
            filter_subject=subject,
        )
        self.batch = batch
        self.fetch_timeout = fetch_timeout
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        # 1 keeps the stream's order; more settles up to that many messages of a batch at
        # once, for handlers whose messages are independent and slow (API calls).
        self.concurrency = concurrency
        # Either re-reads from a point (the start, or a time) on every start: the durable's
        # saved position is dropped.
        self.from_start = from_start or start_time is not None
        self._catch_up = CatchUp(f"consumer {durable!r} on stream {stream!r}")
        self._near_target = asyncio.Event()
        self._catch_up_task: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._judged_before = 0  # stream sequence up to which a previous run settled all
        # Stream sequences handled but not acknowledged; bounded, oldest forgotten first.
        self._handled_unacked: OrderedDict[int, None] = OrderedDict()

    async def start(self) -> None:
        if self.from_start:
            # What the previous run settled was judged then: replaying it must not publish
            # its error events again (every restart re-published every malformed message).
            with contextlib.suppress(nats.js.errors.NotFoundError):
                info = await self.bus.js.consumer_info(self.stream, self.durable)
                self._judged_before = info.ack_floor.stream_seq if info.ack_floor else 0
                await self.bus.js.delete_consumer(self.stream, self.durable)
        await self._subscribe()
        self._task = asyncio.create_task(self._run(), name=f"consumer:{self.durable}")
        self._catch_up_task = asyncio.create_task(self._watch_catch_up(),
                                                  name=f"catch-up:{self.durable}")

    @property
    def is_caught_up(self) -> bool:
        return self._catch_up.done.is_set()

    async def caught_up(self, timeout: float) -> None:
        """Return once every message that matched at start is acknowledged or terminated
        (a nak'd one must be redelivered and settled first); raise
        :class:`NotCaughtUpError`, with the progress made, after ``timeout`` seconds."""
        await self._catch_up.wait(timeout)

    async def _watch_catch_up(self) -> None:
        """Decide catch-up by the server's word, not our count: a restarted durable may have
        nothing left to deliver, and an ack that was lost leaves the message pending."""
        progress = self._catch_up
        while progress.target is None:
            try:
                progress.target = await last_sequence(self.bus, self.stream, self.subject)
            except BusUnavailableError as e:
                log.info("catch-up target unknown, retrying", durable=self.durable, error=str(e))
                await self._pause(0.5)
                if self._stopping.is_set():
                    return
        while progress.target > 0 and not self._stopping.is_set():
            try:
                info = await self.bus.js.consumer_info(self.stream, self.durable)
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
                info = None
            if info is not None and (
                (info.ack_floor.stream_seq if info.ack_floor else 0) >= progress.target
                or (info.num_pending == 0 and info.num_ack_pending == 0)
            ):
                break
            # Poll slowly while replaying, quickly once the target message was settled (its
            # ack or term may still be on its way to the server).
            near = progress.highest >= progress.target
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._near_target.wait(), 0.05 if near else 0.5)
            self._near_target.clear()
        if not self._stopping.is_set():
            progress.reached()

    def _settled(self, sequence: int) -> None:
        self._catch_up.settled(sequence)
        target = self._catch_up.target
        if target is not None and sequence >= target:
            self._near_target.set()

    async def _subscribe(self) -> None:
        self._psub = await self.bus.js.pull_subscribe(
            self.subject, durable=self.durable, stream=self.stream, config=self.config
        )

    async def stop(self) -> None:
        """Finish the message in hand, then stop fetching."""
        self._stopping.set()
        if self._catch_up_task is not None:
            self._catch_up_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._catch_up_task
        if self._task is not None:
            await self._task
        with contextlib.suppress(Exception):
            await self._psub.unsubscribe()

    async def _run(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            if self.bus.nc.is_closed:
                log.warning("connection closed; consumer stops", durable=self.durable)
                return
            try:
                msgs = await self._psub.fetch(self.batch, timeout=self.fetch_timeout)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except (nats.errors.Error, nats.js.errors.Error, OSError) as e:
                # Server restarting or connection lost: wait, then fetch again (the durable
                # consumer keeps our position on the server).
                log.info("fetch failed, retrying", durable=self.durable, error=repr(e),
                         retry_in=backoff)
                await self._pause(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff = 0.1
            if self.concurrency == 1:
                for msg in msgs:
                    await self._settle(msg)
                    if self._stopping.is_set():
                        break
            else:
                await self._settle_concurrently(msgs)

    async def _settle_concurrently(self, msgs: list[Msg]) -> None:
        """Settle a batch with up to ``concurrency`` handlers running; a stop lets the ones
        in hand finish and leaves the rest unacknowledged for redelivery."""
        slots = asyncio.Semaphore(self.concurrency)

        async def one(msg: Msg) -> None:
            async with slots:
                if not self._stopping.is_set():
                    await self._settle(msg)

        await asyncio.gather(*(one(m) for m in msgs))

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _settle(self, msg: Msg) -> None:
        pattern = _metrics.pattern_of(msg.subject)
        service = self.bus.service
        sequence = msg.metadata.sequence.stream
        if sequence in self._handled_unacked:
            await self._ack(msg, sequence)
            return
        try:
            decoded = decode(msg.subject, msg.data, self.message_type)
        except DecodeError as e:
            _metrics.counter(_metrics.DECODE_ERRORS, service, pattern).inc()
            await self._terminate(msg, "malformed-message", str(e))
            return
        _metrics.counter(_metrics.RECEIVED, service, pattern).inc()
        try:
            await self.handler(msg.subject, decoded)
        except PermanentError as e:
            _metrics.counter(_metrics.HANDLER_ERRORS, service, pattern, "term").inc()
            await self._terminate(msg, "invalid-request", str(e), obj=e.obj)
            return
        except TemporaryError as e:
            _metrics.counter(_metrics.HANDLER_ERRORS, service, pattern, "retry").inc()
            log.info("temporary failure, will retry", subject=msg.subject, error=str(e))
            await self._nak(msg, e.retry_after)
            return
        except Exception:  # noqa: BLE001 - retried up to max_deliver, never lost silently
            _metrics.counter(_metrics.HANDLER_ERRORS, service, pattern, "retry").inc()
            log.exception("handler failed, will retry", subject=msg.subject,
                          delivered=msg.metadata.num_delivered)
            await self._nak(msg, 1.0)
            return
        self._settled(sequence)
        await self._ack(msg, sequence)

    async def _ack(self, msg: Msg, sequence: int) -> None:
        try:
            await msg.ack_sync()
        except (TimeoutError, nats.errors.Error) as e:
            log.info("ack not confirmed; a redelivery will be acked without handling",
                     subject=msg.subject, sequence=sequence, error=repr(e))
            self._handled_unacked[sequence] = None
            while len(self._handled_unacked) > 10_000:
                self._handled_unacked.popitem(last=False)
            return
        self._handled_unacked.pop(sequence, None)

    async def _nak(self, msg: Msg, delay: float) -> None:
        with contextlib.suppress(nats.errors.Error):
            await msg.nak(delay=delay)

    async def _terminate(self, msg: Msg, code: str, reason: str, *, obj: str = "") -> None:
        sequence = msg.metadata.sequence.stream
        replayed = sequence <= self._judged_before
        (log.debug if replayed else log.warning)(
            "message terminated", subject=msg.subject, code=code, reason=reason, replayed=replayed)
        with contextlib.suppress(nats.errors.Error):
            await msg.term()
        self._settled(sequence)
        if replayed:
            return
        await publish_error(self.bus, code=code, message=reason, subject=msg.subject, obj=obj,
                            permanent=True)


async def publish_error(bus: Bus, *, code: str, message: str, subject: str = "",
                        obj: str = "", permanent: bool = True) -> None:
    """Publish an ErrorEvent for whoever waits on this service; never raises."""
    now = Timestamp()
    now.GetCurrentTime()
    event = platform_pb2.ErrorEvent(
        service=bus.service, code=code, message=message, subject=subject, object=obj,
        observed_at=now, permanent=permanent,
    )
    try:
        await bus.publish(subjects.error(subjects.token(bus.service)), event)
    except AlnairError as e:
        log.warning("could not publish error event", error=str(e), code=code)
