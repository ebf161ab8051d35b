"""Typed publish/subscribe and request-reply over a real nats-server."""

from __future__ import annotations

import asyncio

import pytest

from alnair.v1 import inventory_pb2, metrics_pb2, platform_pb2
from alnair_common import AlnairError, Bus, BusUnavailableError, PermanentError, subjects
from alnair_common.bus import _metrics
from alnair_common.testing import wait_for


def _batch(node: str, util: float) -> metrics_pb2.NodeSampleBatch:
    return metrics_pb2.NodeSampleBatch(
        node=node, gpus=[metrics_pb2.GpuSample(gpu_uuid="GPU-1", utilization_ratio=util)]
    )


async def test_typed_round_trip(bus: Bus) -> None:
    got: list[tuple[str, metrics_pb2.NodeSampleBatch]] = []

    async def handler(subject: str, msg: metrics_pb2.NodeSampleBatch) -> None:
        got.append((subject, msg))

    await bus.subscribe("alnair.metrics.gpu.*", metrics_pb2.NodeSampleBatch, handler)
    await bus.nc.flush()
    await bus.publish(subjects.gpu_metrics("node-a"), _batch("node-a", 0.25))
    await wait_for(lambda: asyncio.sleep(0, got), what="sample received")
    assert got == [("alnair.metrics.gpu.node-a", _batch("node-a", 0.25))]


async def test_stream_subject_is_stored_and_acknowledged(bus: Bus) -> None:
    from alnair_common import ensure_streams

    await ensure_streams(bus)
    inv = inventory_pb2.NodeInventory(node="n1", gpus=[inventory_pb2.Gpu(uuid="GPU-1")])
    await bus.publish(subjects.node_inventory("n1"), inv)
    info = await bus.js.stream_info("INVENTORY")
    assert info.state.messages == 1


async def test_publishing_the_wrong_type_is_refused(bus: Bus) -> None:
    with pytest.raises(PermanentError, match="carries alnair.v1.NodeSampleBatch"):
        await bus.publish(subjects.gpu_metrics("n1"), inventory_pb2.NodeInventory())


async def test_malformed_payload_is_counted_and_subscriber_keeps_working(bus: Bus) -> None:
    got: list[float] = []

    async def handler(_: str, msg: metrics_pb2.NodeSampleBatch) -> None:
        got.append(msg.gpus[0].utilization_ratio)

    before = _metrics.DECODE_ERRORS.labels("test", "alnair.metrics.gpu.<node>")._value.get()
    await bus.subscribe("alnair.metrics.gpu.*", metrics_pb2.NodeSampleBatch, handler)
    await bus.nc.flush()
    await bus.nc.publish("alnair.metrics.gpu.n1", b"\xff\x00garbage")
    await bus.nc.publish("alnair.metrics.gpu.n1", b"\x0a\x14truncated")
    await bus.publish(subjects.gpu_metrics("n1"), _batch("n1", 0.5))
    await wait_for(lambda: asyncio.sleep(0, got), what="good sample after bad ones")
    after = _metrics.DECODE_ERRORS.labels("test", "alnair.metrics.gpu.<node>")._value.get()
    assert got == [0.5]
    assert after - before == 2


async def test_a_failing_handler_does_not_end_the_subscription(bus: Bus) -> None:
    seen: list[str] = []

    async def handler(_: str, msg: metrics_pb2.NodeSampleBatch) -> None:
        seen.append(msg.node)
        if msg.node == "boom":
            raise RuntimeError("handler bug")

    await bus.subscribe("alnair.metrics.gpu.*", metrics_pb2.NodeSampleBatch, handler)
    await bus.nc.flush()
    await bus.publish(subjects.gpu_metrics("boom"), _batch("boom", 0.1))
    await bus.publish(subjects.gpu_metrics("fine"), _batch("fine", 0.1))
    await wait_for(lambda: asyncio.sleep(0, len(seen) == 2), what="both delivered")
    assert seen == ["boom", "fine"]


async def test_request_reply_through_micro_service(bus: Bus) -> None:
    async def health(_: platform_pb2.StatusRequest) -> platform_pb2.HealthReport:
        return platform_pb2.HealthReport(service="probe", ready=True, live=True)

    await bus.serve("alnair-probe", {subjects.health("probe"): (platform_pb2.StatusRequest, health)})
    answer = await bus.request(subjects.health("probe"), platform_pb2.StatusRequest(),
                               platform_pb2.HealthReport)
    assert (answer.service, answer.ready) == ("probe", True)
    # Discoverable like any nats.micro service.
    ping = await bus.nc.request("$SRV.PING.alnair-probe", b"", timeout=2)
    assert b"alnair-probe" in ping.data


async def test_malformed_request_gets_an_error_reply_and_service_keeps_serving(bus: Bus) -> None:
    async def health(_: platform_pb2.StatusRequest) -> platform_pb2.HealthReport:
        return platform_pb2.HealthReport(service="probe", ready=True)

    await bus.serve("alnair-probe", {subjects.health("probe"): (platform_pb2.StatusRequest, health)})
    reply = await bus.nc.request(subjects.health("probe"), b"\xff\xff", timeout=2)
    assert reply.headers["Nats-Service-Error-Code"] == "400"
    assert "cannot decode" in reply.headers["Nats-Service-Error"]
    answer = await bus.request(subjects.health("probe"), platform_pb2.StatusRequest(),
                               platform_pb2.HealthReport)
    assert answer.ready


async def test_a_failing_responder_answers_500_with_the_reason(bus: Bus) -> None:
    async def broken(_: platform_pb2.StatusRequest) -> platform_pb2.HealthReport:
        raise ValueError("disk full")

    await bus.serve("alnair-broken", {subjects.health("broken"): (platform_pb2.StatusRequest,
                                                                   broken)})
    with pytest.raises(AlnairError, match="500: ValueError: disk full"):
        await bus.request(subjects.health("broken"), platform_pb2.StatusRequest(),
                          platform_pb2.HealthReport)


async def test_request_without_responder_is_a_clear_temporary_error(bus: Bus) -> None:
    with pytest.raises(BusUnavailableError, match="nobody serves 'alnair.health.ghost'"):
        await bus.request(subjects.health("ghost"), platform_pb2.StatusRequest(),
                          platform_pb2.HealthReport, timeout=0.5)


async def test_connect_to_a_dead_server_fails_with_the_address() -> None:
    from alnair_common.natsd import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(BusUnavailableError, match=url):
        await Bus.connect(url, service="test", first_connect_attempts=2, connect_timeout=0.2)


async def test_newest_is_the_last_stored_message_of_its_subject(bus: Bus, nats_server) -> None:  # type: ignore[no-untyped-def]
    """None before anything is stored; then the last message of that subject (another
    subject's newer one does not count); an undecodable one is a DecodeError; no server is
    BusUnavailableError."""
    from alnair.v1 import job_pb2
    from alnair_common import DecodeError, ensure_streams

    await ensure_streams(bus)
    subject = subjects.job_workers("j1")
    assert await bus.newest(subject, job_pb2.WorkerPlan) is None
    await bus.publish(subject, job_pb2.WorkerPlan(generation=1))
    await bus.publish(subject, job_pb2.WorkerPlan(generation=2))
    await bus.publish(subjects.job_workers("other"), job_pb2.WorkerPlan(generation=9))
    newest = await bus.newest(subject, job_pb2.WorkerPlan)
    assert newest is not None and newest.generation == 2
    await bus.js.publish(subject, b"\xff\xff not a plan")
    with pytest.raises(DecodeError):
        await bus.newest(subject, job_pb2.WorkerPlan)
    nats_server.stop()
    with pytest.raises(BusUnavailableError):
        await bus.newest(subject, job_pb2.WorkerPlan)
