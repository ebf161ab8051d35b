from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from dp_harness import H200, PluginEnv, make_env

from alnair_common import Bus
from alnair_common.natsd import NatsServer
from alnair_gpu import RecordedInventory, SimulatedInventory


@pytest.fixture
def h200() -> RecordedInventory:
    """The GPU of a real H200 node as NVML reported it."""
    return RecordedInventory.load(H200)


@pytest.fixture
async def h200_env(tmp_path: Path, nats_server: NatsServer, bus: Bus, h200: RecordedInventory
                   ) -> AsyncIterator[PluginEnv]:
    async for env in make_env(tmp_path, nats_server, bus, h200):
        yield env


@pytest.fixture
async def two_gpu_env(tmp_path: Path, nats_server: NatsServer, bus: Bus) -> AsyncIterator[PluginEnv]:
    async for env in make_env(tmp_path, nats_server, bus, SimulatedInventory.parse("sim:2x80")):
        yield env
