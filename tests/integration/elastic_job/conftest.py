"""The elastic-job controller for the bus tests of this folder."""

from __future__ import annotations

import pytest
from ej_support import CARDS, running_controller

from alnair_common.natsd import NatsServer


@pytest.fixture
async def controller(nats_server: NatsServer):
    async with running_controller(nats_server.url, CARDS) as service:
        yield service
