"""Durable delivery: streams provisioned from the subject table and pull consumers.

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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from alnair.v1 import platform_pb2

from .. import subjects
from ..errors import AlnairError, DecodeError, PermanentError, TemporaryError
from ..logs import get_logger
from . import _metrics
from ._client import Bus
from ._codec import decode

M = TypeVar("M", bound=Message)
log = get_logger("alnair.bus")


async def ensure_streams(bus: Bus, specs: tuple[subjects.StreamSpec, ...] = subjects.STREAMS,
                         *, replicas: int = 1) -> None:
    """Create or update every stream; safe to call from every service on every start."""
    for spec in specs:
        config = StreamConfig(
            name=spec.name,
            subjects=list(spec.subjects),
            description=spec.description,
            storage=StorageType.FILE,
            max_age=spec.max_age_seconds,
            duplicate_window=spec.duplicate_window_seconds,
            num_replicas=replicas,
        )
        try:
            await bus.js.stream_info(spec.name)
        except nats.js.errors.NotFoundError:
            with contextlib.suppress(nats.js.errors.BadRequestError):
                await bus.js.add_stream(config)
                continue
        await bus.js.update_stream(config)


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
            deliver_policy=DeliverPolicy.ALL,
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
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        # Stream sequences handled but not acknowledged; bounded, oldest forgotten first.
        self._handled_unacked: OrderedDict[int, None] = OrderedDict()

    async def start(self) -> None:
        await self._subscribe()
        self._task = asyncio.create_task(self._run(), name=f"consumer:{self.durable}")

    async def _subscribe(self) -> None:
        self._psub = await self.bus.js.pull_subscribe(
            self.subject, durable=self.durable, stream=self.stream, config=self.config
        )

    async def stop(self) -> None:
        """Finish the message in hand, then stop fetching."""
        self._stopping.set()
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
            await self._terminate(msg, "invalid-request", str(e))
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

    async def _terminate(self, msg: Msg, code: str, reason: str) -> None:
        log.warning("message terminated", subject=msg.subject, code=code, reason=reason)
        with contextlib.suppress(nats.errors.Error):
            await msg.term()
        await publish_error(self.bus, code=code, message=reason, subject=msg.subject,
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
