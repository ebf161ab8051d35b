"""The service runtime: health over HTTP and the bus, durable work finished on shutdown."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from alnair.v1 import platform_pb2, workload_pb2
from alnair_common import (
    Bus,
    DurableConsumer,
    Service,
    ServiceSettings,
    ensure_streams,
    subjects,
)
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for


class SlowCounter(Service):
    """Counts workload events; each takes 0.2 s, so shutdown lands mid-message."""

    name = "slow-counter"
    role = "test service that counts workload events"

    def __init__(self, settings: ServiceSettings) -> None:
        super().__init__(settings)
        self.handled: list[int] = []
        self.started: list[int] = []

    async def setup(self) -> None:
        assert self.bus is not None

        async def handle(_: str, ev: workload_pb2.WorkloadEvent) -> None:
            self.started.append(ev.sequence)
            await asyncio.sleep(0.2)
            self.handled.append(ev.sequence)

        await self.consume(DurableConsumer(
            self.bus, stream="WORKLOADS", durable="slow-counter",
            subject=subjects.workload_events(), message_type=workload_pb2.WorkloadEvent,
            handler=handle, batch=1, fetch_timeout=0.2,
        ))


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_health_answers_on_http_and_bus_and_shutdown_finishes_in_flight_work(
    nats_server: NatsServer, bus: Bus,
) -> None:
    service = SlowCounter(ServiceSettings(nats_url=nats_server.url, node_name="n1"))
    run = asyncio.create_task(service.run())
    await asyncio.wait_for(service.ready.wait(), 10)
    assert service.http is not None
    base = f"http://127.0.0.1:{service.http.port}"

    status, body = await asyncio.to_thread(_get, base + "/readyz")
    assert status == 200 and body["checks"] == {"nats": "ok"}
    report = await bus.request(subjects.health("slow-counter"), platform_pb2.StatusRequest(),
                               platform_pb2.HealthReport)
    assert report.ready and report.role == SlowCounter.role
    status, _ = await asyncio.to_thread(_get, base + "/healthz")
    assert status == 200

    await ensure_streams(bus)
    for i in range(5):
        await bus.publish(subjects.workload_events(), workload_pb2.WorkloadEvent(sequence=i))
    await wait_for(lambda: asyncio.sleep(0, len(service.started) >= 2), what="work started")
    service.request_stop()
    await asyncio.wait_for(run, 10)

    # The message in hand when the stop came was finished, not abandoned half-way...
    assert service.started == service.handled
    # ...and what was not handled is still in the stream for the next start.
    info = await bus.js.consumer_info("WORKLOADS", "slow-counter")
    assert info.num_pending + info.num_ack_pending == 5 - len(service.handled)


async def test_not_ready_while_nats_is_away(nats_server: NatsServer) -> None:
    service = SlowCounter(ServiceSettings(nats_url=nats_server.url))
    run = asyncio.create_task(service.run())
    await asyncio.wait_for(service.ready.wait(), 10)
    assert service.http is not None
    url = f"http://127.0.0.1:{service.http.port}/readyz"
    nats_server.stop()

    def unready() -> tuple[int, dict] | None:
        answer = _get(url)
        return answer if answer[0] == 503 else None

    status, body = await wait_for(lambda: asyncio.to_thread(unready), what="readyz says 503")
    assert body["checks"]["nats"] == "not connected to NATS"
    nats_server.start()
    await wait_for(lambda: asyncio.to_thread(lambda: _get(url)[0] == 200), timeout=15,
                   what="ready again after NATS returned")
    service.request_stop()
    await asyncio.wait_for(run, 10)
