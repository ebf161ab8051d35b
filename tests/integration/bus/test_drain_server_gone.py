"""A bus whose server just went away still drains: no exception, and no 30 s wait.

A service stopping because nats-server died (SIGKILL of `alnair up` takes it along) calls
``Bus.drain`` while the client may or may not have noticed yet: before, the drain is a
close; while it drains, the reset connection is logged and the client closed. A server that
dies, or stops answering, *during* the drain ends it too (nats-py would wait 10 s for each
flush's answer, 30 s for the subscriptions)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from alnair.v1 import platform_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer, free_port


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.02, 0.3, 2.5])
async def test_drain_after_the_server_died_returns_at_once(tmp_path, delay: float) -> None:
    server = NatsServer(store_dir=tmp_path / "jetstream", port=free_port())
    server.start()
    try:
        bus = await Bus.connect(server.url, service="test")
        seen: list[object] = []

        async def on_event(_subject: str, message: object) -> None:
            seen.append(message)
        await bus.subscribe(subjects.error("x"), platform_pb2.ErrorEvent, on_event)
        await bus.nc.publish("alnair.test.raw", b"pending at the kill")  # unflushed
    finally:
        assert server.process is not None
        server.process.kill()
        server.process.wait()
    await asyncio.sleep(delay)
    started = time.monotonic()
    await asyncio.wait_for(bus.drain(), timeout=10)
    assert time.monotonic() - started < 5
    assert bus.nc.is_closed


async def _bus_with_a_micro_service(tmp_path: Path) -> tuple[NatsServer, Bus]:
    server = NatsServer(store_dir=tmp_path / "jetstream", port=free_port())
    server.start()
    bus = await Bus.connect(server.url, service="test")

    async def on_event(_subject: str, message: object) -> None:
        pass
    await bus.subscribe(subjects.error("x"), platform_pb2.ErrorEvent, on_event)

    async def answer(_: platform_pb2.StatusRequest) -> platform_pb2.HealthReport:
        return platform_pb2.HealthReport()
    await bus.serve("alnair-test", {subjects.health("test"): (platform_pb2.StatusRequest, answer)})
    return server, bus


@pytest.mark.parametrize("dies_after", [0.0, 0.3])
async def test_a_server_dying_during_the_drain_ends_it_at_once(tmp_path: Path,
                                                               dies_after: float) -> None:
    server, bus = await _bus_with_a_micro_service(tmp_path)
    assert server.process is not None
    # Frozen, the server keeps the connection open but answers no flush: the drain is under
    # way when it dies, whatever the machine's load.
    server.process.send_signal(signal.SIGSTOP)

    async def die() -> None:
        await asyncio.sleep(dies_after)
        assert server.process is not None
        server.process.kill()
    try:
        killer = asyncio.create_task(die())
        started = time.monotonic()
        await asyncio.wait_for(bus.drain(), timeout=20)
        took = time.monotonic() - started
        await killer
    finally:
        server.process.kill()
        server.process.wait()
    assert took < dies_after + 2, f"drain took {took:.1f} s after the server died"
    assert bus.nc.is_closed


async def test_a_server_that_never_answers_bounds_the_drain(tmp_path: Path) -> None:
    server, bus = await _bus_with_a_micro_service(tmp_path)
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        await asyncio.wait_for(bus.drain(timeout=1.0), timeout=20)
        took = time.monotonic() - started
    finally:
        server.process.kill()
        server.process.wait()
    assert 1.0 <= took < 3, f"drain took {took:.1f} s with a 1 s budget"
    assert bus.nc.is_closed
