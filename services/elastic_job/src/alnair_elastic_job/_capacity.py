"""What the allocator may divide: every healthy card, less the shares of other workloads.

Read from the buckets the scheduler keeps — ``node_inventory`` (capacity per card) and
``gpu_allocations`` (committed shares per card) — and followed by watches, so the answer is
current without a round trip per tick. The shares of the jobs' own workers count as free:
the allocator redistributes them. The scheduler still places every worker and commits its
share by compare-and-set; this view only keeps grants within what could be placed, and a
grant it overstates (a share committed since the last watch update) ends as a worker that
waits in Scheduling, never as an over-committed card.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from alnair.v1 import allocation_pb2, inventory_pb2
from alnair_common import subjects

from ._allocator import FreeCard

GIB = 1024**3
INVENTORY_BUCKET = subjects.NODE_INVENTORY_BUCKET
ALLOCATIONS_BUCKET = subjects.GPU_ALLOCATIONS_BUCKET


def whole_cards(inventories: Iterable[inventory_pb2.NodeInventory]) -> list[FreeCard]:
    """Every healthy card at its full size: what the cluster could hold with nothing running."""
    cards = []
    for inv in inventories:
        for g in inv.gpus:
            if g.uuid and g.health != inventory_pb2.GPU_HEALTH_UNHEALTHY:
                cards.append(FreeCard(inv.node, g.uuid, int(g.vgpu_memory_gib or g.memory_bytes // GIB),
                                      int(g.vgpu_compute_percent or 100)))
    return cards


def free_cards(inventories: Iterable[inventory_pb2.NodeInventory],
               allocations: Mapping[str, allocation_pb2.CardAllocation],
               ours: frozenset[str]) -> list[FreeCard]:
    """Free memory and compute per healthy card; ``allocations`` by GPU uuid, ``ours`` the
    workload uids of the jobs' workers."""
    cards = []
    for card in whole_cards(inventories):
        memory, compute = card.memory_gib, card.compute_percent
        alloc = allocations.get(card.uuid)
        for share in alloc.shares if alloc is not None else ():
            if share.workload.uid not in ours:
                memory -= share.memory_gib
                compute -= share.compute_percent
        if memory > 0 and compute > 0:
            cards.append(FreeCard(card.node, card.uuid, memory, compute))
    return cards
