"""A bus whose server just went away still drains: no exception, and no 30 s wait.

A service stopping because nats-server died (SIGKILL of `alnair up` takes it along) calls
``Bus.drain`` while the client may or may not have noticed yet: before, the drain is a
close; while it drains, the reset connection is logged and the client closed."""

from __future__ import annotations

import asyncio
import time

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
