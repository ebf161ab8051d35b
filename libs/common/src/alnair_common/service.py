"""The runtime every Alnair service shares: connect, serve health, run, shut down cleanly.

A service subclasses :class:`Service`, sets ``name`` and ``role`` and overrides
:meth:`Service.setup` (subscribe, start consumers and tasks). :func:`run_service` is its
console entrypoint: settings are validated first (a bad setting exits 2 with the reason),
then SIGTERM/SIGINT start a graceful shutdown: consumers finish the message in hand, the
connection drains, background tasks are cancelled last. Once a stop has begun, the process
ends within ``shutdown_grace_seconds`` whatever it is waiting on (exit 1 if that cut it short).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, ClassVar

from alnair.v1 import platform_pb2

from . import subjects
from .bus import Bus, DurableConsumer, ensure_streams
from .config import ServiceSettings, load_settings
from .errors import AlnairError, ConfigError
from .health import Health, HealthServer
from .leadership import Leadership
from .logs import configure_logging, get_logger


class Service:
    """Base of every service. Subclasses set ``name``/``role`` and override ``setup``."""

    name: ClassVar[str] = "service"
    role: ClassVar[str] = ""
    settings_class: ClassVar[type[ServiceSettings]] = ServiceSettings
    # Replicas of a leader-elected service stand by until they hold its lease
    # (alnair_common.leadership); only the leader runs ``setup``.
    leader_elected: ClassVar[bool] = False

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.log = get_logger(f"alnair.{self.name}")
        self.health = Health(service=self.name, role=self.role)
        self.bus: Bus | None = None
        self.http: HealthServer | None = None
        self._consumers: list[DurableConsumer] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._stop = asyncio.Event()
        self.ready = asyncio.Event()
        self.leadership: Leadership | None = None

    # -- for subclasses -------------------------------------------------------------------

    async def setup(self) -> None:
        """Subscribe and start work. Runs after the bus is connected and streams exist."""

    async def teardown(self) -> None:
        """Release what ``setup`` acquired; runs after consumers stopped."""

    async def consume(self, consumer: DurableConsumer) -> DurableConsumer:
        """Start a durable consumer that shutdown will stop before draining the bus."""
        await consumer.start()
        self._consumers.append(consumer)
        return consumer

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run a background task; if it crashes the service stops (a supervisor restarts it)."""
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)
        return task

    @property
    def lease_name(self) -> str:
        """What the replicas of a leader-elected service contend for: those that would share
        durable consumers (and so must not run at once) share it."""
        return self.name

    # -- lifecycle ------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Run until :meth:`request_stop` (or a signal, via :func:`run_service`)."""
        s = self.settings
        self.bus = await Bus.connect(s.nats_servers, service=self.name,
                                     credentials=s.nats_credentials, tls_ca=s.nats_tls_ca)
        self.health.checks["nats"] = self._check_nats
        try:
            await ensure_streams(self.bus)
            await self.bus.serve(
                f"alnair-{self.name}",
                {subjects.health(self.name): (platform_pb2.StatusRequest, self._health)},
                description=self.role,
            )
            self.http = HealthServer(self.health, s.health_host, s.health_port)
            port = await self.http.start()
            if not self.leader_elected or await self._lead():
                await self.setup()
                self.ready.set()
                self.log.info("service ready", role=self.role, health_port=port,
                              nats=s.nats_url)
            await self._stop.wait()
        finally:
            await self._shutdown()

    async def _lead(self) -> bool:
        """Stand by until this replica holds the lease, then keep it; a lost
        lease stops the service, which its supervisor starts again as a standby. False when
        asked to stop while standing by."""
        assert self.bus is not None
        holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # A standby is ready (it does its job: standing by, so a rolling update can go on),
        # and says so in its role, which `alnair status` and the health report show.
        role = self.health.role

        def on_standby(current: str) -> None:
            self.health.role = f"standby: {current} leads — {role}"
            self.log.info("standing by", leader=current)

        self.health.role = f"standby: waiting for the lease — {role}"
        acquiring = asyncio.create_task(Leadership.acquire(
            self.bus, self.lease_name, holder, ttl=self.settings.leader_lease_seconds,
            on_standby=on_standby))
        stopping = asyncio.create_task(self._stop.wait())
        await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not acquiring.done():
            acquiring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquiring
            return False
        self.leadership = acquiring.result()
        self.health.role = role

        async def hold() -> None:
            assert self.leadership is not None
            why = await self.leadership.keep()
            self.log.warning("leadership lost; stopping", reason=why)
            self.leadership = None
            self._stop.set()

        self.spawn(hold(), "lease")
        return True

    async def _shutdown(self) -> None:
        self._stop.set()  # however the run ended (a failed setup, too): a stop has begun
        self.log.info("shutting down")
        self.health.live = False
        for consumer in self._consumers:
            with contextlib.suppress(Exception):
                await consumer.stop()
        with contextlib.suppress(Exception):
            await self.teardown()
        if self.leadership is not None:
            await self.leadership.release()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.bus is not None:
            await self.bus.drain()
        if self.http is not None:
            await self.http.stop()
        self.log.info("stopped")

    async def _health(self, _: platform_pb2.StatusRequest) -> platform_pb2.HealthReport:
        return await self.health.report()

    async def _check_nats(self) -> str | None:
        return None if self.bus is not None and self.bus.connected else "not connected to NATS"

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        self.log.error("background task crashed; stopping", task=task.get_name(),
                       error=repr(task.exception()))
        self._stop.set()


class _ExitDeadline:
    """Ends the process ``seconds`` after :meth:`arm`, wherever its shutdown has got to.

    Each step of a graceful shutdown is bounded, but their sum is not, and a step that waits
    on a bus that died in the middle (SIGKILL of `alnair up` takes nats-server along) once
    kept a service alive for over 30 s. Under a killed `alnair up` nobody follows the
    parent-death SIGTERM with a SIGKILL: the process has to end itself. A timer thread, so
    that neither a busy event loop nor a thread that interpreter exit joins can hold it up.
    """

    def __init__(self, seconds: float, service: str) -> None:
        self.seconds = seconds
        self.service = service
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        """Start the countdown; a second call keeps the first deadline."""
        if self._timer is None:
            self._timer = threading.Timer(self.seconds, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        # Not through the logger: the main thread may hold its lock, stuck in a write.
        with contextlib.suppress(OSError):
            os.write(2, f"alnair-{self.service}: shutdown not finished after "
                        f"{self.seconds:g} s (shutdown_grace_seconds); exiting\n".encode())
        os._exit(1)


def run_service(cls: type[Service]) -> None:
    """Console entrypoint: validate settings, configure logging, run until a signal."""
    try:
        settings = load_settings(cls.settings_class)
    except ConfigError as e:
        print(f"alnair-{cls.name}: {e}", file=sys.stderr)
        raise SystemExit(2) from e
    configure_logging(settings.log_level, settings.log_format, service=cls.name,
                      node=settings.node_name)
    deadline = _ExitDeadline(settings.shutdown_grace_seconds, cls.name)

    async def _main() -> None:
        service = cls(settings)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, service.request_stop)

        async def arm_on_stop() -> None:
            await service._stop.wait()
            deadline.arm()

        arming = asyncio.create_task(arm_on_stop(), name="exit-deadline")
        try:
            await service.run()
        finally:
            arming.cancel()

    try:
        asyncio.run(_main())
    except AlnairError as e:
        get_logger(f"alnair.{cls.name}").error("service failed", error=str(e))
        raise SystemExit(1) from e
    finally:
        deadline.arm()  # asyncio.run's clean-up and the interpreter's exit are bounded too
