"""The elastic-job controller run in-process on a real nats-server, for the tests that drive it
over the bus (here and kube-bridge's, whose conftest puts this folder on the path)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import alnair_elastic_job as ej
from alnair_common.testing import wait_for


@contextlib.asynccontextmanager
async def running_controller(nats_url: str, cards: Sequence[ej.FreeCard]) -> AsyncIterator[ej.ElasticJobService]:
    """The service, ready, dividing ``cards`` (its capacity); stopped after."""
    service = ej.ElasticJobService(ej.ElasticJobSettings(nats_url=nats_url, node_name="test", tick_seconds=0.1),
                                   capacity=lambda: list(cards))
    task = asyncio.create_task(service.run())

    async def ready() -> bool:
        if task.done():
            task.result()
        return service.ready.is_set()

    await wait_for(ready, timeout=20, what="elastic-job ready")
    try:
        yield service
    finally:
        service.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)
