"""Running the cache hydrator in tests, asking it for data sets and reading its answers."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from alnair.v1 import cache_pb2, platform_pb2
from alnair_cache_hydrator import CacheHydratorService, CacheHydratorSettings
from alnair_common import Bus, TypedKV, subjects
from alnair_common.testing import wait_for

PHASE = cache_pb2.CachePhase


def settings(nats_url: str, tier_url: str, data_dir: Path, **extra: Any) -> CacheHydratorSettings:
    return CacheHydratorSettings(nats_url=nats_url, cache_tier_url=tier_url, data_dir=data_dir,
                                 cache_prefix="t", cache_status_interval_seconds=0.05,
                                 cache_tier_retry_seconds=0.1, **extra)


@contextlib.asynccontextmanager
async def running(s: CacheHydratorSettings) -> AsyncIterator[CacheHydratorService]:
    service = CacheHydratorService(s)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.ready.wait(), 20)
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 30)


def spec(name: str, source: str, **extra: Any) -> cache_pb2.CacheDatasetSpec:
    return cache_pb2.CacheDatasetSpec(name=name, source=source, **extra)


async def add(bus: Bus, dataset: cache_pb2.CacheDatasetSpec) -> str:
    request_id = uuid.uuid4().hex
    await bus.publish(subjects.cache_requests(),
                      cache_pb2.CacheDatasetRequest(request_id=request_id, add=dataset))
    return request_id


async def remove(bus: Bus, name: str, namespace: str = "") -> str:
    request_id = uuid.uuid4().hex
    await bus.publish(subjects.cache_requests(), cache_pb2.CacheDatasetRequest(
        request_id=request_id, remove=cache_pb2.CacheDatasetRemove(name=name, namespace=namespace)))
    return request_id


async def status(bus: Bus, name: str) -> cache_pb2.CacheDatasetStatus | None:
    kv = await TypedKV.open(bus, "cache_datasets", cache_pb2.CacheDatasetStatus)
    found = await kv.get(name)
    return None if found is None else found.value


async def settled(bus: Bus, name: str, request_id: str, *, timeout: float = 30.0,
                  phases: tuple[int, ...] = (PHASE.CACHE_PHASE_READY, PHASE.CACHE_PHASE_FAILED),
                  ) -> cache_pb2.CacheDatasetStatus:
    """The data set's status once it answers ``request_id`` in one of ``phases``."""
    async def probe() -> cache_pb2.CacheDatasetStatus | None:
        s = await status(bus, name)
        return s if s is not None and s.request_id == request_id and s.phase in phases else None

    return await wait_for(probe, timeout=timeout, what=f"data set {name} settled")


class ErrorEvents:
    """The hydrator's error events, collected from the moment of subscribing."""

    def __init__(self) -> None:
        self.events: list[platform_pb2.ErrorEvent] = []

    @classmethod
    async def follow(cls, bus: Bus) -> ErrorEvents:
        errors = cls()

        async def on_error(_subject: str, event: platform_pb2.ErrorEvent) -> None:
            errors.events.append(event)

        await bus.subscribe(subjects.error("cache-hydrator"), platform_pb2.ErrorEvent, on_error)
        return errors

    async def matching(self, text: str) -> platform_pb2.ErrorEvent:
        async def probe() -> platform_pb2.ErrorEvent | None:
            return next((e for e in self.events if text in e.message), None)

        return await wait_for(probe, timeout=10, what=f"error event with {text!r}")
