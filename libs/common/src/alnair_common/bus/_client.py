"""The typed NATS client every Alnair service uses.

One :class:`Bus` per process wraps a nats-py connection that reconnects forever with
backoff. Subjects are checked against the subject table on the way out and payloads are
decoded against it on the way in; a payload that does not decode is logged with its subject,
counted and dropped — it never reaches a handler and never stops a subscription.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import nats
import nats.errors
import nats.js.errors
import nats.micro
from google.protobuf.message import Message
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.micro.request import Request

from .. import subjects
from ..bus_permissions import inbox_prefix, permissions, subject_allowed
from ..errors import AlnairError, BusUnavailableError, ConfigError, DecodeError, PermissionDeniedError
from ..logs import get_logger
from . import _metrics
from ._codec import decode, encode

M = TypeVar("M", bound=Message)
Handler = Callable[[str, M], Awaitable[None]]
Responder = Callable[[M], Awaitable[Message]]

MSG_ID_HEADER = "Nats-Msg-Id"
# The most a drain takes before the connection is simply closed. nats-py's own bounds are a
# flush's 10 s wait for its PONG (once per subscription of a micro service, one after the
# other) and 30 s for the subscriptions to drain: a server that goes away during the drain
# never answers, and a stopping service waited for all of them.
DRAIN_SECONDS = 5.0
log = get_logger("alnair.bus")


def _auth_options(credentials: Path | None, role: str | None, tls_ca: Path | None) -> dict[str, object]:
    """nats-py's connect options for an identity's seed file and a server's CA."""
    options: dict[str, object] = {}
    if credentials is not None and role is not None:
        permissions(role)  # an unknown role is a ConfigError before any connection
        if not credentials.is_file():
            raise ConfigError(f"bus credentials {credentials} not found: `alnair up` writes "
                              "them into its data directory, Kubernetes mounts them from the "
                              "service's Secret")
        options = {"nkeys_seed": str(credentials), "inbox_prefix": inbox_prefix(role)}
    if tls_ca is not None:
        options["tls"] = ssl.create_default_context(cafile=str(tls_ca))
        # TLS before any NATS byte: a plain-text impostor on the network gets nothing, and
        # nats-py would otherwise fall back to plain text with a server that offers no TLS.
        options["tls_handshake_first"] = True
    return options


class Bus:
    """A connected, typed view of the Alnair bus for one service."""

    def __init__(self, nc: Client, service: str, role: str | None = None) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.service = service
        # The identity the server knows this connection by (None: a server without auth).
        self.role = role
        self._may_publish: dict[str, bool] = {}
        allowed = permissions(role) if role else {"publish": {"allow": []}, "subscribe": {"allow": []}}
        self._publish_allow = allowed["publish"]["allow"]
        self._subscribe_allow = allowed["subscribe"]["allow"]
        self._micro: list[nats.micro.service.Service] = []
        self._lost = asyncio.Event()  # set while the connection is down (nats-py's callbacks)

    @classmethod
    async def connect(
        cls,
        servers: list[str] | str,
        *,
        service: str,
        credentials: Path | None = None,
        role: str | None = None,
        tls_ca: Path | None = None,
        connect_timeout: float = 2.0,
        max_reconnect_attempts: int = -1,
        first_connect_attempts: int = 10,
    ) -> Bus:
        """Connect, retrying the first connection too (the server may still be starting).

        ``credentials`` is the NKey seed file of ``role`` (default: the service's name); the
        connection then uses that role's private inbox prefix. ``tls_ca`` verifies a
        ``tls://`` server against that CA bundle.
        """
        servers = [servers] if isinstance(servers, str) else servers
        if credentials is not None:
            role = role or service
        auth = _auth_options(credentials, role, tls_ca)

        async def _on_error(e: Exception) -> None:
            if "authorization violation" in str(e).lower():
                if not bus_ref:  # the first connection: its PermissionDeniedError says so, once
                    refused.append(str(e))
                    return
                log.warning("the bus server refused this identity's credentials", service=service,
                            role=role, error=str(e))
                return
            if "permissions violation" in str(e).lower():
                log.warning("the bus server refused this identity a subject", service=service,
                            role=role, error=str(e))
                return
            if refused and not bus_ref:
                return  # the server dropping a connection it refused: said with the refusal
            log.info("nats connection error", service=service, error=str(e))

        async def _on_disconnect() -> None:
            # A disconnect we asked for (drain/close) is neither lost nor worth a warning.
            if not (bus_ref and (bus_ref[0].nc.is_draining or bus_ref[0].nc.is_closed)):
                if bus_ref:
                    bus_ref[0]._lost.set()
                log.warning("nats disconnected", service=service)

        async def _on_reconnect() -> None:
            if bus_ref:
                bus_ref[0]._lost.clear()
            log.info("nats reconnected", service=service)

        bus_ref: list[Bus] = []
        refused: list[str] = []  # the server said no to these credentials
        # nats-py can hang in a TLS handshake that fails (e.g. a CA that does not match):
        # the first connection gets a budget of its own attempts, then it is an outage.
        budget = first_connect_attempts * (connect_timeout + 0.5) + connect_timeout + 1.0
        try:
            nc = await asyncio.wait_for(nats.connect(
                servers=servers,
                name=service,
                connect_timeout=connect_timeout,
                **auth,  # type: ignore[arg-type]
                reconnect_time_wait=0.5,
                # Bounded for the first connection (nats-py would otherwise retry a server
                # that never came up forever); unbounded once connected.
                max_reconnect_attempts=first_connect_attempts,
                error_cb=_on_error,
                disconnected_cb=_on_disconnect,
                reconnected_cb=_on_reconnect,
            ), budget)
        except (TimeoutError, OSError, ssl.SSLError, nats.errors.Error) as e:
            if refused or "Authorization Violation" in str(e):
                who = f"the {role} credentials {credentials}" if credentials else "no credentials"
                raise PermissionDeniedError(
                    f"NATS at {', '.join(servers)} refused {who}: connect with the seed file "
                    "of a bus identity (ALNAIR_NATS_CREDENTIALS; `alnair up` writes them to "
                    "<data dir>/credentials)") from e
            raise BusUnavailableError(
                f"cannot connect to NATS at {', '.join(servers)} after "
                f"{first_connect_attempts} attempts: {e!r}"
            ) from e
        nc.options["max_reconnect_attempts"] = max_reconnect_attempts
        bus_ref.append(cls(nc, service, role if credentials is not None else None))
        return bus_ref[0]

    @property
    def connected(self) -> bool:
        return self.nc.is_connected

    async def publish(self, subject: str, message: Message, *, msg_id: str | None = None,
                      timeout: float = 10.0) -> None:
        """Publish ``message``.

        Stream subjects wait for the server's ack. Without one (the server is restarting, the
        connection is being re-established) the publish is retried with the same message id
        until ``timeout``: JetStream's de-duplication stores it once however many tries it
        took. Pass a stable ``msg_id`` when a retry by the *caller* must not be stored twice.
        """
        spec = subjects.spec_for(subject)
        self.check_may_publish(subject)
        data = encode(subject, message, spec)
        if spec.transport is subjects.Transport.STREAM:
            await self._publish_durably(subject, data, msg_id or uuid.uuid4().hex, timeout)
        else:
            try:
                await self.nc.publish(subject, data)
            except nats.errors.Error as e:
                raise BusUnavailableError(f"publish on {subject!r} failed: {e!r}") from e
        _metrics.counter(_metrics.PUBLISHED, self.service, spec.pattern).inc()

    def check_may_publish(self, subject: str) -> None:
        """Fail at once, with the reason, where the server would drop the message silently
        (a refused publish gets no ack: the sender would only see a time-out)."""
        if self.role is None:
            return
        allowed = self._may_publish.get(subject)
        if allowed is None:
            allowed = self._may_publish[subject] = subject_allowed(self._publish_allow, subject)
        if not allowed:
            spec = subjects.spec_for(subject)
            who = ", ".join(spec.publishers) or "nobody"
            raise PermissionDeniedError(
                f"bus identity {self.role!r} may not publish on {subject!r}; the subject table "
                f"lets {who} publish there (alnair_common.subjects)")

    async def _publish_durably(self, subject: str, data: bytes, msg_id: str,
                               timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        delay = 0.05
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                await self.js.publish(subject, data, timeout=max(0.1, min(2.0, remaining)),
                                      headers={MSG_ID_HEADER: msg_id})
                return
            except (TimeoutError, nats.errors.Error) as e:
                if remaining <= delay or isinstance(e, nats.errors.ConnectionClosedError):
                    raise BusUnavailableError(
                        f"publish on {subject!r} not acknowledged within {timeout:.1f} s: {e!r}"
                    ) from e
                log.info("publish not acknowledged, retrying", subject=subject, error=repr(e))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def subscribe(
        self, subject: str, message_type: type[M], handler: Handler[M], *, queue: str = ""
    ) -> Subscription:
        """Core (non-durable) subscription; each decoded message is handed to ``handler``.

        A handler that raises is logged and counted; the subscription goes on.
        """
        if self.role is not None and not subject_allowed(self._subscribe_allow, subject):
            raise PermissionDeniedError(
                f"bus identity {self.role!r} may not subscribe to {subject!r}; add it to the "
                "readers of its entry in alnair_common.subjects")

        async def _on_msg(msg: Msg) -> None:
            decoded = self._decode_or_count(msg.subject, msg.data, message_type)
            if decoded is None:
                return
            try:
                await handler(msg.subject, decoded)
            except Exception as e:  # noqa: BLE001 - one bad message must not end the subscription
                _metrics.counter(_metrics.HANDLER_ERRORS,
                    self.service, _metrics.pattern_of(msg.subject), "dropped"
                ).inc()
                log.exception("handler failed", subject=msg.subject, error=str(e))

        return await self.nc.subscribe(subject, queue=queue, cb=_on_msg)

    async def request(
        self, subject: str, message: Message, reply_type: type[M], *, timeout: float = 2.0
    ) -> M:
        """Send a request and decode the typed answer; no answer in time is temporary."""
        data = encode(subject, message)
        try:
            msg = await self.nc.request(subject, data, timeout=timeout)
        except nats.errors.NoRespondersError as e:
            raise BusUnavailableError(f"nobody serves {subject!r}") from e
        except (TimeoutError, nats.errors.TimeoutError) as e:
            raise BusUnavailableError(f"no answer on {subject!r} within {timeout:.1f} s") from e
        if msg.headers and msg.headers.get("Nats-Service-Error"):
            raise AlnairError(
                f"{subject!r} answered error {msg.headers.get('Nats-Service-Error-Code')}: "
                f"{msg.headers['Nats-Service-Error']}"
            )
        return decode(subject, msg.data, reply_type)

    async def last_stored(self, stream: str, subject: str) -> RawStreamMsg | None:
        """The last message of ``stream`` matching ``subject`` (wildcards allowed), as stored;
        None when there is none. BusUnavailableError when the server does not answer."""
        try:
            return await self.js.get_last_msg(stream, subject)
        except nats.js.errors.NotFoundError:
            return None
        except (TimeoutError, nats.errors.Error) as e:
            raise BusUnavailableError(
                f"cannot read the last message of {subject!r} in stream {stream!r}: {e!r}") from e

    async def newest(self, subject: str, message_type: type[M]) -> M | None:
        """The newest message stored on the stream subject ``subject`` (the stream is the
        subject table's), decoded; None when there is none. A reader's look-ahead, e.g.
        whether a newer command already waits behind the one being handled.
        BusUnavailableError when the server does not answer, DecodeError when what is stored
        does not decode."""
        raw = await self.last_stored(subjects.spec_for(subject).stream, subject)
        return None if raw is None else decode(subject, raw.data or b"", message_type)

    async def serve(
        self,
        name: str,
        endpoints: dict[str, tuple[type[M], Responder[M]]],
        *,
        version: str = "0.1.0",
        description: str = "",
    ) -> None:
        """Answer requests on ``endpoints`` (subject → (request type, responder)) as a
        ``nats.micro`` service named ``name``, so ``$SRV.PING/INFO/STATS`` discover it.

        A request that does not decode, or a responder that raises, gets a service error
        reply (400 / 500) with the reason instead of silence.
        """
        svc = await nats.micro.add_service(
            self.nc, name=name, version=version, description=description or name
        )
        self._micro.append(svc)
        for subject, (request_type, responder) in endpoints.items():
            await svc.add_endpoint(
                name=subject.replace(".", "-"),
                subject=subject,
                handler=self._responder(subject, request_type, responder),
            )

    def _responder(
        self, subject: str, request_type: type[M], responder: Responder[M]
    ) -> Callable[[Request], Awaitable[None]]:
        async def _handle(req: Request) -> None:
            try:
                message = decode(subject, req.data, request_type)
            except DecodeError as e:
                _metrics.counter(_metrics.DECODE_ERRORS, self.service, _metrics.pattern_of(subject)).inc()
                log.warning("malformed request", subject=subject, error=str(e))
                await req.respond_error("400", str(e))
                return
            try:
                answer = await responder(message)
            except Exception as e:  # noqa: BLE001 - the caller gets the reason, we keep serving
                log.exception("responder failed", subject=subject)
                await req.respond_error("500", f"{type(e).__name__}: {e}")
                return
            await req.respond(encode(subject, answer))

        return _handle

    def _decode_or_count(self, subject: str, data: bytes, message_type: type[M]) -> M | None:
        pattern = _metrics.pattern_of(subject)
        try:
            decoded = decode(subject, data, message_type)
        except DecodeError as e:
            _metrics.counter(_metrics.DECODE_ERRORS, self.service, pattern).inc()
            log.warning("malformed message dropped", subject=subject, error=str(e))
            return None
        _metrics.counter(_metrics.RECEIVED, self.service, pattern).inc()
        return decoded

    async def drain(self, timeout: float = DRAIN_SECONDS) -> None:
        """Stop receiving, let in-flight handlers finish, flush publishes, then close.

        Bounded: after ``timeout`` seconds, or as soon as the connection is lost (a server
        that dies during the drain, as ``alnair up`` killed takes nats-server along, answers
        no flush), the connection is closed instead — there is nothing left to flush to.
        """
        if self.nc.is_closed:
            return
        if not self.nc.is_connected:  # the bus went away: nothing to flush, and draining would
            self._micro.clear()       # wait its whole drain timeout (30 s) for a reconnect
            await self._close()
            return
        graceful = asyncio.create_task(self._drain_gracefully(), name="bus-drain")
        lost = asyncio.create_task(self._lost.wait(), name="bus-drain-lost")
        try:
            await asyncio.wait({graceful, lost}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if graceful.done():
            graceful.result()
            return
        # Not awaited: nats-py's drain swallows the cancel and then flushes once more (10 s).
        graceful.cancel()
        graceful.add_done_callback(lambda t: t.cancelled() or t.exception())
        log.warning("drain cut short; closing", service=self.service,
                    reason="connection lost" if self._lost.is_set() else f"over {timeout:g} s")
        await self._close()

    async def _drain_gracefully(self) -> None:
        for svc in self._micro:
            try:
                await svc.stop()
            except Exception as e:  # noqa: BLE001 - shutdown goes on
                log.warning("micro service stop failed", error=str(e))
        self._micro.clear()
        if self.nc.is_closed:
            return
        if not self.nc.is_connected:
            await self._close()
            return
        try:
            await self.nc.drain()
        except (TimeoutError, OSError, nats.errors.Error) as e:
            # OSError: the connection was reset while draining (the server went meanwhile)
            log.warning("drain failed; closing", error=str(e))
            await self._close()

    async def _close(self) -> None:
        try:
            await self.nc.close()
        except (OSError, nats.errors.Error) as e:
            log.warning("closing the connection failed", error=str(e))
