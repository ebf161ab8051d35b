"""Nodes that leave the cluster take their GPUs with them.

A node's inventory is published by the device plugin running on it, which cannot say that
its node was deleted. kube-bridge does: when a node is deleted (or is missing from a list,
i.e. it went while nobody watched) and an inventory is on record for it, an empty inventory
is published on ``alnair.node.<node>.inventory`` and the record is removed from the
``node_inventory`` bucket, so the scheduler stops placing work on cards that are gone; the
training jobs' pods bound to it are deleted so their jobs replace them (_lost_nodes.py).
"""

from __future__ import annotations

import asyncio

from alnair.v1 import inventory_pb2
from alnair_common import Bus, PermanentError, TypedKV, get_logger, subjects

from ._lost_nodes import LostNodes
from ._watch import Changed, Synced

log = get_logger("alnair.kube-bridge.nodes")


class NodeEvents:
    def __init__(self, bus: Bus, kv: TypedKV[inventory_pb2.NodeInventory],
                 lost: LostNodes | None = None) -> None:
        self.bus = bus
        self.kv = kv
        self.lost = lost  # the training jobs' pods on a gone node (_lost_nodes.py)

    @classmethod
    async def open(cls, bus: Bus, lost: LostNodes | None = None) -> NodeEvents:
        return cls(bus, await TypedKV.open(bus, subjects.NODE_INVENTORY_BUCKET, inventory_pb2.NodeInventory), lost)

    async def handle(self, item: Synced | Changed) -> None:
        if isinstance(item, Changed):
            if item.type == "DELETED":
                name = (item.obj.get("metadata") or {}).get("name", "")
                await self.gone(name)
                if self.lost is not None:
                    await asyncio.to_thread(self.lost.node_deleted, name)
            return
        present = {(n.get("metadata") or {}).get("name") for n in item.items}
        for key in await self.kv.keys():
            if key not in present:
                await self.gone(key)
        if self.lost is not None:
            await asyncio.to_thread(self.lost.nodes_listed, {p for p in present if p})

    async def gone(self, node: str) -> None:
        try:
            subject = subjects.node_inventory(node)
        except PermanentError:
            return  # a name no inventory can have been published under
        record = await self.kv.get(node)
        if record is None:
            return
        empty = inventory_pb2.NodeInventory(node=node, simulated=record.value.simulated)
        empty.observed_at.GetCurrentTime()
        await self.bus.publish(subject, empty, msg_id=f"node-gone:{node}:{record.revision}")
        await self.kv.delete(node)
        log.info("node gone; its GPUs retracted", node=node, gpus=len(record.value.gpus))
