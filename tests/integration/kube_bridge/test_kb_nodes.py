"""A deleted node's GPUs are retracted: empty inventory published, record removed."""

from __future__ import annotations

from kb_support import stream_messages

from alnair.v1 import inventory_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes


def inventory(node: str) -> inventory_pb2.NodeInventory:
    inv = inventory_pb2.NodeInventory(node=node)
    inv.gpus.add(uuid=f"GPU-{node}-0", index=0, model="NVIDIA H200", memory_bytes=141 << 30,
                 vgpu_memory_gib=141, vgpu_compute_percent=100)
    return inv


async def test_deleted_nodes_lose_their_inventory(bus: Bus, kube: KubeNamespace,
                                                  kwok_nodes: KwokNodes, start_bridge) -> None:
    [node] = kwok_nodes(1)
    kv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
    # What device plugins published: one for the live node, one for a node deleted while
    # no bridge was watching.
    await kv.put(node, inventory(node))
    await kv.put("long-gone-node", inventory("long-gone-node"))
    await start_bridge()

    async def gone(name: str):
        return await kv.get(name) is None

    await wait_for(lambda: gone("long-gone-node"), timeout=20, what="stale inventory retracted")
    assert await kv.get(node) is not None

    kube.core.delete_node(node)
    await wait_for(lambda: gone(node), timeout=20, what="deleted node's inventory retracted")
    published = await stream_messages(bus, "INVENTORY", subjects.node_inventory(node),
                                      inventory_pb2.NodeInventory)
    assert [len(i.gpus) for i in published] == [0]
