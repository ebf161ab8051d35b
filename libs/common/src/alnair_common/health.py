"""Health and readiness of a service, over HTTP (for Kubernetes probes) and the bus.

``/healthz`` answers 200 while the process is live, ``/readyz`` 200 only when every check
passes (connected to NATS, the service's own checks), ``/metrics`` the Prometheus registry.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web
from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from alnair.v1 import platform_pb2

Check = Callable[[], Awaitable[str | None]]
"""Returns None when healthy, or what is wrong."""


@dataclass
class Health:
    service: str
    role: str
    version: str = "0.1.0"
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    checks: dict[str, Check] = field(default_factory=dict)
    live: bool = True

    async def report(self) -> platform_pb2.HealthReport:
        results: dict[str, str] = {}
        for name, check in self.checks.items():
            try:
                problem = await check()
            except Exception as e:  # noqa: BLE001 - a failing check is a result, not a crash
                problem = f"{type(e).__name__}: {e}"
            results[name] = "ok" if problem is None else problem
        started = Timestamp()
        started.FromDatetime(self.started_at)
        return platform_pb2.HealthReport(
            service=self.service, instance=self.instance, live=self.live,
            ready=self.live and all(v == "ok" for v in results.values()),
            checks=results, role=self.role, started_at=started, version=self.version,
        )


async def serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0 picks a free port); return its runner and the port
    actually bound, which callers report so a probe or scrape can find it."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = site._server.sockets if site._server else []  # noqa: SLF001 - the bound port
    return runner, sockets[0].getsockname()[1] if sockets else port


class HealthServer:
    """aiohttp server for the probes and /metrics; port 0 picks a free port."""

    def __init__(self, health: Health, host: str, port: int,
                 registry: CollectorRegistry = REGISTRY) -> None:
        self.health = health
        self.host = host
        self.port = port
        self.registry = registry
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner, self.port = await serve(app, self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"live": self.health.live}, status=200 if self.health.live else 503)

    async def _readyz(self, _: web.Request) -> web.Response:
        report = await self.health.report()
        body = {"ready": report.ready, "checks": dict(report.checks), "role": report.role}
        return web.json_response(body, status=200 if report.ready else 503)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})
