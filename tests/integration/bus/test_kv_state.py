"""Shared state in KV buckets: compare-and-set detects conflicts; mutate never loses updates."""

from __future__ import annotations

import asyncio

import pytest

from alnair.v1 import inventory_pb2
from alnair_common import Bus, PermanentError, RevisionConflictError, TypedKV, subjects


def _inv(count: int) -> inventory_pb2.NodeInventory:
    return inventory_pb2.NodeInventory(node="n1", gpus=[inventory_pb2.Gpu(index=i)
                                                        for i in range(count)])


async def test_compare_and_set_conflict_is_detected(bus: Bus) -> None:
    kv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
    rev = await kv.create("n1", _inv(1))
    await kv.update("n1", _inv(2), rev)  # first writer wins
    with pytest.raises(RevisionConflictError, match=f"since revision {rev}"):
        await kv.update("n1", _inv(3), rev)  # second writer saw the old revision
    current = await kv.get("n1")
    assert current is not None and len(current.value.gpus) == 2


async def test_a_bucket_the_subject_table_does_not_name_is_refused_and_not_created(bus: Bus) -> None:
    with pytest.raises(PermanentError, match=r"'node_inventroy' is not in alnair_common.subjects.BUCKETS"
                       r" \(node_inventory, .*\); use one of its \*_BUCKET names"):
        await TypedKV.open(bus, "node_inventroy", inventory_pb2.NodeInventory)
    names = [info.config.name for info in await bus.js.streams_info()]
    assert "KV_node_inventroy" not in names, "a misspelt bucket was created"
    kv = await TypedKV.open(bus, subjects.NODE_INVENTORY_BUCKET, inventory_pb2.NodeInventory)
    assert kv.bucket == "node_inventory"


async def test_create_refuses_an_existing_key(bus: Bus) -> None:
    kv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
    await kv.create("n1", _inv(1))
    with pytest.raises(RevisionConflictError):
        await kv.create("n1", _inv(1))


async def test_concurrent_mutations_lose_nothing(nats_server) -> None:  # type: ignore[no-untyped-def]
    writers = [await Bus.connect(nats_server.url, service=f"w{i}") for i in range(3)]
    try:
        kvs = [await TypedKV.open(b, "gpu_allocations", inventory_pb2.NodeInventory)
               for b in writers]

        def add_gpu(current: inventory_pb2.NodeInventory | None) -> inventory_pb2.NodeInventory:
            new = current or inventory_pb2.NodeInventory(node="n1")
            new.gpus.append(inventory_pb2.Gpu(index=len(new.gpus)))
            return new

        async def writer(kv: TypedKV[inventory_pb2.NodeInventory]) -> None:
            for _ in range(15):
                await kv.mutate("n1", add_gpu, attempts=200)

        await asyncio.gather(*(writer(kv) for kv in kvs))
        final = await kvs[0].get("n1")
        assert final is not None
        assert [g.index for g in final.value.gpus] == list(range(45))
    finally:
        for b in writers:
            await b.drain()


async def test_missing_and_deleted_keys_read_as_none(bus: Bus) -> None:
    kv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
    assert await kv.get("nope") is None
    rev = await kv.put("n2", _inv(1))
    await kv.delete("n2", revision=rev)
    assert await kv.get("n2") is None
    assert await kv.keys() == []


async def test_listing_keys_leaves_no_consumer_on_the_server(bus: Bus) -> None:
    """`alnair ps` lists a bucket on every call: a consumer left per listing reached the
    server's limit per stream after ~1,000 calls and broke ps, run and the agent."""
    kv = await TypedKV.open(bus, "workload_states", inventory_pb2.NodeInventory)
    await kv.put("a", inventory_pb2.NodeInventory(node="a"))
    await kv.put("b", inventory_pb2.NodeInventory(node="b"))
    await kv.put("gone", inventory_pb2.NodeInventory(node="gone"))
    await kv.delete("gone")
    for _ in range(50):
        assert await kv.keys() == ["a", "b"]
    info = await bus.js.stream_info("KV_workload_states")
    assert info.state.consumer_count == 0
