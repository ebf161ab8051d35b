"""The real cache hydrator says where a data set is hot, and the scheduler follows it: a
node-local directory tier names its node, a cluster-wide Redis names none (no preference)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from prometheus_client import REGISTRY
from sched_harness import Adapter, Observer, start_scheduler, stop_scheduler

from alnair.v1 import cache_pb2
from alnair_cache_hydrator import CacheHydratorService, CacheHydratorSettings
from alnair_common import Bus, TypedKV, subjects
from alnair_common.annotations import DATASET
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.dataplane import dataplane_bin, redis_node  # noqa: F401 — fixtures
from alnair_common.testing.redis_cluster import RedisNode

READY = cache_pb2.CACHE_PHASE_READY


def source_dir(root: Path) -> Path:
    data = root / "imagenet"
    data.mkdir(parents=True)
    for i in range(4):
        (data / f"shard-{i}.bin").write_bytes(bytes([i]) * (256 << 10))
    return data


@contextlib.asynccontextmanager
async def hydrator(url: str, tier_url: str, root: Path, **extra: object,
                   ) -> AsyncIterator[CacheHydratorService]:
    service = CacheHydratorService(CacheHydratorSettings(
        nats_url=url, cache_tier_url=tier_url, data_dir=root / "hydrator", cache_prefix="t",
        cache_allowed_roots=str(root), cache_status_interval_seconds=0.05, **extra))
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.ready.wait(), 20)
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 30)


async def hydrated(bus: Bus, data: Path) -> cache_pb2.CacheDatasetStatus:
    await bus.publish(subjects.cache_requests(), cache_pb2.CacheDatasetRequest(
        request_id=uuid.uuid4().hex, add=cache_pb2.CacheDatasetSpec(
            name="imagenet", namespace="default", source=f"file://{data}")))
    kv = await TypedKV.open(bus, "cache_datasets", cache_pb2.CacheDatasetStatus)

    async def ready() -> cache_pb2.CacheDatasetStatus | None:
        found = await kv.get("default.imagenet")
        return found.value if found is not None and found.value.phase == READY else None

    return await wait_for(ready, timeout=30, what="imagenet READY")


async def test_directory_tier_names_its_node_and_the_pod_goes_there(
        nats_server: NatsServer, bus: Bus, tmp_path: Path) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("node-a", "node-b"):
        await adapter.inventory(node, 1, 80)
    data = source_dir(tmp_path / "src")
    # No cache_tier_nodes: a dir:/// tier is local to the hydrator's own node.
    async with hydrator(nats_server.url, f"dir://{tmp_path}/tier", tmp_path / "src",
                        node_name="node-b"):
        status = await hydrated(bus, data)
        assert list(status.nodes) == ["node-b"] and status.progress == 1.0
        # What the dashboard's hydration-progress panel reads.
        assert REGISTRY.get_sample_value("alnair_cache_dataset_progress_ratio",
                                         {"namespace": "default", "dataset": "imagenet"}) == 1.0
    service, task = await start_scheduler(nats_server.url)
    try:
        pod = await adapter.pending("train", 10, 10, annotations={DATASET: "imagenet"})
        (d,) = await seen.bound(pod)
        assert d.assignment.node == "node-b"
        assert "dataset imagenet hot on node-b (100% cached)" in d.reason
    finally:
        await stop_scheduler(service, task)


async def test_cluster_wide_redis_names_no_node_so_no_preference(
        nats_server: NatsServer, bus: Bus, tmp_path: Path,
        redis_node: Callable[..., RedisNode]) -> None:  # noqa: F811 — the fixture
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("node-a", "node-b"):
        await adapter.inventory(node, 1, 80)
    data = source_dir(tmp_path / "src")
    async with hydrator(nats_server.url, redis_node().url, tmp_path / "src", node_name="node-b"):
        status = await hydrated(bus, data)
        assert list(status.nodes) == []
    service, task = await start_scheduler(nats_server.url)
    try:
        pod = await adapter.pending("train", 10, 10, annotations={DATASET: "imagenet"})
        (d,) = await seen.bound(pod)
        assert d.assignment.node == "node-a"  # the profile's choice
        assert "in a tier local to no node: no preference" in d.reason
    finally:
        await stop_scheduler(service, task)
