"""JetStream durability: a durable consumer sees every message exactly once across a
nats-server restart, duplicates are dropped by message id, and bad records are settled."""

from __future__ import annotations

import asyncio
from collections import Counter

from alnair.v1 import platform_pb2, workload_pb2
from alnair_common import (
    Bus,
    DurableConsumer,
    PermanentError,
    TemporaryError,
    ensure_streams,
    subjects,
)
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for


def _event(i: int) -> workload_pb2.WorkloadEvent:
    return workload_pb2.WorkloadEvent(
        workload=workload_pb2.Workload(ref={"uid": f"w{i}", "name": f"job-{i}"}), sequence=i
    )


def _consumer(bus: Bus, handler, durable: str = "test-durable") -> DurableConsumer:  # type: ignore[no-untyped-def]
    return DurableConsumer(
        bus, stream="WORKLOADS", durable=durable, subject=subjects.workload_events(),
        message_type=workload_pb2.WorkloadEvent, handler=handler, max_deliver=5, ack_wait=2.0,
        batch=8, fetch_timeout=0.2,
    )


async def test_every_message_exactly_once_across_a_server_restart(
    nats_server: NatsServer,
) -> None:
    seen: Counter[int] = Counter()

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        seen[ev.sequence] += 1

    producer = await Bus.connect(nats_server.url, service="producer")
    consumer_bus = await Bus.connect(nats_server.url, service="consumer")
    try:
        await ensure_streams(producer)
        consumer = _consumer(consumer_bus, handler)
        await consumer.start()
        for i in range(100):
            await producer.publish(subjects.workload_events(), _event(i), msg_id=f"e{i}")
        await wait_for(lambda: asyncio.sleep(0, len(seen) >= 30), what="first messages consumed")

        nats_server.stop()  # in the middle of the stream
        nats_server.start()
        await wait_for(lambda: asyncio.sleep(0, producer.connected), timeout=15,
                       what="producer reconnected")
        for i in range(100, 150):
            await producer.publish(subjects.workload_events(), _event(i), msg_id=f"e{i}")

        await wait_for(lambda: asyncio.sleep(0, len(seen) == 150), timeout=20,
                       what="all 150 messages consumed")
        await asyncio.sleep(2.5)  # longer than ack_wait: a missing ack would redeliver now
        await consumer.stop()
        assert sorted(seen) == list(range(150))
        assert set(seen.values()) == {1}, {k: v for k, v in seen.items() if v != 1}
    finally:
        await producer.drain()
        await consumer_bus.drain()


async def test_a_restarted_consumer_resumes_where_it_acked(bus: Bus) -> None:
    await ensure_streams(bus)
    first: list[int] = []
    second: list[int] = []

    async def take_first(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        first.append(ev.sequence)

    async def take_second(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        second.append(ev.sequence)

    for i in range(10):
        await bus.publish(subjects.workload_events(), _event(i))
    c1 = _consumer(bus, take_first)
    await c1.start()
    await wait_for(lambda: asyncio.sleep(0, len(first) == 10), what="first consumer done")
    await c1.stop()
    for i in range(10, 15):
        await bus.publish(subjects.workload_events(), _event(i))
    c2 = _consumer(bus, take_second)  # same durable name: a service restart
    await c2.start()
    await wait_for(lambda: asyncio.sleep(0, len(second) == 5), what="second consumer done")
    await c2.stop()
    assert first == list(range(10)) and second == list(range(10, 15))


async def test_duplicate_publishes_with_one_message_id_are_stored_once(bus: Bus) -> None:
    await ensure_streams(bus)
    for _ in range(3):
        await bus.publish(subjects.workload_events(), _event(1), msg_id="pod-uid-1:running")
    info = await bus.js.stream_info("WORKLOADS")
    assert info.state.messages == 1


async def test_failures_are_retried_or_terminated_never_lost(bus: Bus) -> None:
    await ensure_streams(bus)
    attempts: Counter[int] = Counter()
    done: list[int] = []
    errors: list[platform_pb2.ErrorEvent] = []

    async def on_error(_: str, e: platform_pb2.ErrorEvent) -> None:
        errors.append(e)

    await bus.subscribe("alnair.error.>", platform_pb2.ErrorEvent, on_error)

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        attempts[ev.sequence] += 1
        if ev.sequence == 1 and attempts[1] < 3:
            raise TemporaryError("scheduler state not loaded yet", retry_after=0.05)
        if ev.sequence == 2:
            raise PermanentError("workload asks for 250 % compute on one card", obj="team-a/w2")
        done.append(ev.sequence)

    await bus.nc.publish(subjects.workload_events(), b"\xff\xfe not protobuf")
    for i in (1, 2, 3):
        await bus.publish(subjects.workload_events(), _event(i))
    consumer = _consumer(bus, handler)
    await consumer.start()
    await wait_for(lambda: asyncio.sleep(0, sorted(done) == [1, 3] and len(errors) == 2),
                   what="retry succeeded and two records terminated with errors")
    await consumer.stop()
    assert attempts == Counter({1: 3, 2: 1, 3: 1})
    assert sorted(e.code for e in errors) == ["invalid-request", "malformed-message"]
    assert any("250 %" in e.message for e in errors)
    assert {e.code: e.object for e in errors} == {"invalid-request": "team-a/w2", "malformed-message": ""}


async def test_concurrent_consumer_runs_up_to_its_limit_and_settles_everything_once(
    bus: Bus,
) -> None:
    await ensure_streams(bus)
    in_flight = 0
    most = 0
    done: Counter[int] = Counter()
    release = asyncio.Event()

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if most >= 4:
            release.set()
        await release.wait()  # hold every handler until four overlap
        in_flight -= 1
        done[ev.sequence] += 1

    for i in range(20):
        await bus.publish(subjects.workload_events(), _event(i))
    consumer = DurableConsumer(
        bus, stream="WORKLOADS", durable="parallel", subject=subjects.workload_events(),
        message_type=workload_pb2.WorkloadEvent, handler=handler, batch=8, fetch_timeout=0.2,
        concurrency=4,
    )
    await consumer.start()
    await wait_for(lambda: asyncio.sleep(0, len(done) == 20), what="all 20 handled")
    await consumer.stop()
    info = await bus.js.consumer_info("WORKLOADS", "parallel")
    assert most == 4
    assert set(done.values()) == {1} and sorted(done) == list(range(20))
    assert info.num_ack_pending == 0 and info.num_pending == 0
