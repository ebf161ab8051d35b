"""Replay, then live: a consumer says it has caught up exactly when the backlog it started
with is handled — not before, not never — and live messages keep coming after that."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from alnair.v1 import commands_pb2, platform_pb2, workload_pb2
from alnair_common import (
    Bus,
    DecodeError,
    DurableConsumer,
    NotCaughtUpError,
    StreamFollower,
    TemporaryError,
    ensure_streams,
    subjects,
)
from alnair_common.testing import wait_for

Handler = Callable[[str, workload_pb2.WorkloadEvent], Awaitable[None]]


def _event(i: int) -> workload_pb2.WorkloadEvent:
    return workload_pb2.WorkloadEvent(workload=workload_pb2.Workload(ref={"uid": f"w{i}"}), sequence=i)


async def _publish(bus: Bus, numbers: range) -> None:
    for i in numbers:
        await bus.publish(subjects.workload_events(), _event(i))


def _consumer(bus: Bus, handler: Handler, *, durable: str = "replay", from_start: bool = False,
              ) -> DurableConsumer:
    return DurableConsumer(
        bus, stream="WORKLOADS", durable=durable, subject=subjects.workload_events(),
        message_type=workload_pb2.WorkloadEvent, handler=handler, max_deliver=5, ack_wait=2.0,
        batch=8, fetch_timeout=0.2, from_start=from_start)


async def test_caught_up_after_the_backlog_and_not_before_then_live(bus: Bus) -> None:
    await ensure_streams(bus)
    await _publish(bus, range(25))
    seen: list[tuple[int, bool]] = []  # (event, was the consumer already caught up?)

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        seen.append((ev.sequence, consumer.is_caught_up))

    consumer = _consumer(bus, handler)
    await consumer.start()
    try:
        await consumer.caught_up(10.0)
        assert seen == [(i, False) for i in range(25)]
        await _publish(bus, range(25, 30))
        await wait_for(lambda: asyncio.sleep(0, len(seen) == 30), what="live messages handled")
        assert seen[25:] == [(i, True) for i in range(25, 30)]
    finally:
        await consumer.stop()


async def test_caught_up_at_once_on_an_empty_stream_or_one_without_our_subject(bus: Bus) -> None:
    await ensure_streams(bus)
    handled: list[int] = []

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        handled.append(ev.sequence)

    empty = _consumer(bus, handler, durable="empty")
    await empty.start()
    await empty.caught_up(2.0)
    await empty.stop()
    # the WORKLOADS stream also carries PodGroup events: they are not our backlog
    await bus.publish(subjects.podgroup_events(), commands_pb2.PodGroup())
    other = _consumer(bus, handler, durable="other-subject")
    await other.start()
    await other.caught_up(2.0)
    await other.stop()
    assert handled == []


async def test_caught_up_timeout_says_how_far_the_consumer_got(bus: Bus) -> None:
    await ensure_streams(bus)
    await _publish(bus, range(5))
    gate = asyncio.Event()
    handled: list[int] = []

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        if ev.sequence == 3:
            await gate.wait()
        handled.append(ev.sequence)

    consumer = _consumer(bus, handler, durable="slow")
    await consumer.start()
    try:
        await wait_for(lambda: asyncio.sleep(0, handled == [0, 1, 2]), what="first three handled")
        with pytest.raises(NotCaughtUpError, match=r"consumer 'slow' on stream 'WORKLOADS' has not "
                           r"caught up after 0\.3 s: 3 messages handled.*ends at stream sequence 5"
                           ) as caught:
            await consumer.caught_up(0.3)
        assert isinstance(caught.value, TemporaryError)  # a retry (a longer wait) may succeed
        assert not consumer.is_caught_up
        gate.set()
        await consumer.caught_up(5.0)
        assert handled == [0, 1, 2, 3, 4]
    finally:
        gate.set()
        await consumer.stop()


async def test_a_message_to_retry_must_be_settled_before_caught_up(bus: Bus) -> None:
    await ensure_streams(bus)
    await _publish(bus, range(4))
    done: list[int] = []
    failed_once: set[int] = set()

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        if ev.sequence == 1 and 1 not in failed_once:
            failed_once.add(1)
            raise TemporaryError("not ready yet", retry_after=0.3)
        done.append(ev.sequence)

    consumer = _consumer(bus, handler, durable="retry")
    await consumer.start()
    try:
        await consumer.caught_up(10.0)
        assert sorted(done) == [0, 1, 2, 3]
    finally:
        await consumer.stop()


async def test_a_restarted_durable_resumes_without_redelivering_what_it_acked(bus: Bus) -> None:
    await ensure_streams(bus)
    await _publish(bus, range(10))
    runs: list[list[int]] = [[], [], []]

    def collector(run: int) -> Handler:
        async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
            runs[run].append(ev.sequence)
        return handler

    first = _consumer(bus, collector(0))
    await first.start()
    await first.caught_up(10.0)
    await first.stop()
    await _publish(bus, range(10, 15))
    second = _consumer(bus, collector(1))  # same durable name: the service restarted
    await second.start()
    await second.caught_up(10.0)
    await second.stop()
    third = _consumer(bus, collector(2))  # nothing new since: caught up with nothing to do
    await third.start()
    await third.caught_up(5.0)
    await third.stop()
    assert runs == [list(range(10)), list(range(10, 15)), []]


async def test_from_start_reads_the_whole_stream_again(bus: Bus) -> None:
    await ensure_streams(bus)
    await _publish(bus, range(6))
    runs: list[list[int]] = [[], []]

    for run in range(2):
        async def handler(_: str, ev: workload_pb2.WorkloadEvent, run: int = run) -> None:
            runs[run].append(ev.sequence)

        consumer = _consumer(bus, handler, durable="model", from_start=True)
        await consumer.start()
        await consumer.caught_up(10.0)
        await consumer.stop()
    assert runs == [list(range(6)), list(range(6))]


async def _follow_once(bus: Bus, history: list[int], live: int) -> None:
    """Start a follower: it must replay ``history`` (and report the malformed message once),
    say it caught up only after that, then hand over the ``live`` event published next."""
    seen: list[tuple[int, bool]] = []
    malformed: list[DecodeError] = []

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        seen.append((ev.sequence, follower.is_caught_up))

    follower = StreamFollower(
        bus, stream="WORKLOADS", subject=subjects.workload_events(),
        message_type=workload_pb2.WorkloadEvent, handler=handler,
        on_malformed=lambda _, e: malformed.append(e))
    await follower.start()
    try:
        await follower.caught_up(10.0)
        assert seen == [(i, False) for i in history]
        assert len(malformed) == 1 and "WorkloadEvent" in str(malformed[0])
        await _publish(bus, range(live, live + 1))
        await wait_for(lambda: asyncio.sleep(0, len(seen) == len(history) + 1),
                       what="live message handled")
        assert seen[-1] == (live, True)
    finally:
        await follower.stop()


async def test_a_follower_replays_everything_on_each_start_then_follows(bus: Bus) -> None:
    await ensure_streams(bus)
    await _publish(bus, range(3))
    await bus.js.publish(subjects.workload_events(), b"\xff\xfe not protobuf")
    await _publish(bus, range(3, 6))
    await _follow_once(bus, list(range(6)), live=100)
    await _follow_once(bus, [*range(6), 100], live=101)  # a restart: the whole history again


async def test_a_follower_of_an_empty_stream_is_caught_up_at_once(bus: Bus) -> None:
    await ensure_streams(bus)

    async def handler(_: str, ev: workload_pb2.WorkloadEvent) -> None:
        raise AssertionError(f"nothing to deliver, got {ev}")

    follower = StreamFollower(bus, stream="WORKLOADS", subject=subjects.workload_events(),
                              message_type=workload_pb2.WorkloadEvent, handler=handler)
    await follower.start()
    try:
        await follower.caught_up(2.0)
    finally:
        await follower.stop()


async def test_a_replay_reports_each_malformed_message_once(bus: Bus) -> None:
    """A restart that replays from the start must not publish the error events of messages
    the previous run already terminated; one that arrived while it was down is reported."""
    await ensure_streams(bus)
    reported: list[str] = []

    async def on_error(_: str, event: platform_pb2.ErrorEvent) -> None:
        reported.append(event.code)

    await bus.subscribe("alnair.error.>", platform_pb2.ErrorEvent, on_error)
    await bus.js.publish(subjects.workload_events(), b"\xff not protobuf")
    await _publish(bus, range(3))

    async def handler(_: str, _ev: workload_pb2.WorkloadEvent) -> None:
        pass

    async def run_once() -> None:
        consumer = _consumer(bus, handler, durable="model", from_start=True)
        await consumer.start()
        await consumer.caught_up(10.0)
        await consumer.stop()
        await bus.nc.flush()

    await run_once()
    await wait_for(lambda: asyncio.sleep(0, len(reported) == 1), what="the first run's report")
    assert reported == ["malformed-message"]
    await run_once()  # replays the malformed message: no second report
    await bus.js.publish(subjects.workload_events(), b"\xfe also not protobuf")  # while "down"
    await run_once()
    # A sentinel after everything: reports arrive in order on one connection, so once it is
    # here a third report of the replays would have been too.
    await bus.publish(subjects.error("test"), platform_pb2.ErrorEvent(code="sentinel"))
    await wait_for(lambda: asyncio.sleep(0, "sentinel" in reported), what="the sentinel")
    assert reported == ["malformed-message", "malformed-message", "sentinel"]
