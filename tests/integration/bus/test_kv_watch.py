"""Following a KV bucket: current values first with a caught-up signal, then live puts and
deletes, typed; a value that does not decode is skipped and counted, never fatal."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from alnair.v1 import inventory_pb2
from alnair_common import Bus, KVUpdate, KVWatch, NotCaughtUpError, TypedKV
from alnair_common.testing import wait_for

Inventory = inventory_pb2.NodeInventory


def _inv(node: str, gpus: int) -> Inventory:
    return Inventory(node=node, gpus=[inventory_pb2.Gpu(index=i) for i in range(gpus)])


@contextlib.asynccontextmanager
async def _collecting(watch: KVWatch[Inventory]) -> AsyncIterator[list[KVUpdate[Inventory]]]:
    """Iterate ``watch`` in a task, as a service does, collecting what it yields."""
    updates: list[KVUpdate[Inventory]] = []

    async def follow() -> None:
        async for update in watch:
            updates.append(update)

    task = asyncio.create_task(follow())
    try:
        yield updates
    finally:
        await watch.stop()
        await asyncio.wait_for(task, 5.0)  # stopping ends the iteration


def _summary(updates: list[KVUpdate[Inventory]]) -> list[tuple[str, int | None]]:
    return [(u.key, None if u.value is None else len(u.value.gpus)) for u in updates]


async def test_current_values_first_then_live_puts_and_deletes(bus: Bus) -> None:
    kv = await TypedKV.open(bus, "node_inventory", Inventory)
    await kv.put("n1", _inv("n1", 1))
    await kv.put("n2", _inv("n2", 2))
    await kv.put("n1", _inv("n1", 3))  # only the current value is replayed
    await kv.put("gone", _inv("gone", 1))
    await kv.delete("gone")  # deleted before the watch: not reported
    watch = await kv.watch()
    async with _collecting(watch) as updates:
        await watch.caught_up(5.0)
        assert _summary(updates) == [("n2", 2), ("n1", 3)]
        revision = await kv.put("n3", _inv("n3", 4))
        await kv.delete("n2")
        await wait_for(lambda: asyncio.sleep(0, len(updates) == 4), what="live put and delete")
    assert _summary(updates[2:]) == [("n3", 4), ("n2", None)]
    assert updates[2].revision == revision and not updates[2].deleted
    assert updates[3].deleted and updates[3].revision > revision


async def test_an_empty_bucket_is_caught_up_as_soon_as_someone_iterates(bus: Bus) -> None:
    kv = await TypedKV.open(bus, "node_inventory", Inventory)
    watch = await kv.watch()
    async with _collecting(watch) as updates:
        await watch.caught_up(5.0)
        await kv.put("n1", _inv("n1", 1))
        await wait_for(lambda: asyncio.sleep(0, len(updates) == 1), what="first put")
    assert _summary(updates) == [("n1", 1)]


async def test_caught_up_times_out_while_nobody_takes_the_values(bus: Bus) -> None:
    kv = await TypedKV.open(bus, "node_inventory", Inventory)
    await kv.put("n1", _inv("n1", 1))
    watch = await kv.watch()
    try:
        with pytest.raises(NotCaughtUpError, match=r"watch of bucket 'node_inventory' has not "
                                                    r"caught up after 0\.2 s"):
            await watch.caught_up(0.2)
    finally:
        await watch.stop()


async def test_a_value_that_does_not_decode_is_skipped_and_counted(bus: Bus) -> None:
    kv = await TypedKV.open(bus, "node_inventory", Inventory)
    raw = await bus.js.key_value("node_inventory")  # a writer that bypasses the typed bucket
    labels = {"service": "test", "subject": "$KV.node_inventory.>"}
    before = REGISTRY.get_sample_value("alnair_bus_decode_errors_total", labels) or 0.0
    await kv.put("n1", _inv("n1", 1))
    await raw.put("bad", b"\xff\xfe not protobuf")
    watch = await kv.watch()
    async with _collecting(watch) as updates:
        await watch.caught_up(5.0)
        assert _summary(updates) == [("n1", 1)]
        await raw.put("n1", b"\xff\xfe")
        await kv.put("n2", _inv("n2", 2))
        await wait_for(lambda: asyncio.sleep(0, len(updates) == 2), what="the watch goes on")
    assert _summary(updates) == [("n1", 1), ("n2", 2)]
    assert REGISTRY.get_sample_value("alnair_bus_decode_errors_total", labels) == before + 2


async def test_a_stopped_watch_leaves_no_consumer_behind(bus: Bus) -> None:
    """A reader that polls a bucket (`alnair job ls` in a loop) must not pile up consumers
    until the server refuses new ones: each stopped watch deletes its own."""
    kv = await TypedKV.open(bus, "node_inventory", Inventory)
    await kv.put("n1", _inv("n1", 1))
    for _ in range(25):
        assert (await kv.current())["n1"].gpus[0].index == 0

    async def none_left() -> bool:
        return (await bus.js.stream_info("KV_node_inventory")).state.consumer_count == 0

    # Each delete was sent; on a loaded machine the server may answer one after the stream
    # info asked next (CI saw 1 left). Left behind, a consumer would stay 5 minutes.
    await wait_for(none_left, timeout=10, what="every watch's consumer deleted")
