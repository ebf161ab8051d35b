"""Conversion between :class:`NodeGpus` and the bus message ``alnair.v1.NodeInventory``.

Protobuf stays at the edge: services hold NodeGpus and convert when they publish or read.
"""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import inventory_pb2

from ._errors import InventoryFormatError
from ._inventory import GpuInfo, NodeGpus

COMPUTE_PERCENT_PER_GPU = 100


def to_proto(node_gpus: NodeGpus, node: str, *, observed_at: datetime | None = None) -> inventory_pb2.NodeInventory:
    """The node's inventory as published on ``alnair.node.<node>.inventory`` and in KV."""
    stamp = Timestamp()
    stamp.FromDatetime(observed_at or datetime.now(UTC))
    return inventory_pb2.NodeInventory(
        node=node,
        simulated=node_gpus.simulated,
        driver_version=node_gpus.driver_version,
        cuda_version=node_gpus.cuda_version,
        observed_at=stamp,
        gpus=[
            inventory_pb2.Gpu(
                uuid=g.uuid, index=g.index, model=g.model, memory_bytes=g.memory_bytes, sm_count=g.sm_count,
                health=inventory_pb2.GPU_HEALTH_HEALTHY if g.healthy else inventory_pb2.GPU_HEALTH_UNHEALTHY,
                health_reason=g.health_reason, vgpu_memory_gib=g.memory_gib,
                vgpu_compute_percent=COMPUTE_PERCENT_PER_GPU,
                sharing=inventory_pb2.GPU_SHARING_MPS if g.mps else inventory_pb2.GPU_SHARING_TIME_SLICED,
            )
            for g in node_gpus.gpus
        ],
    )


def from_proto(message: inventory_pb2.NodeInventory) -> NodeGpus:
    """Validate a received inventory: every GPU needs a UUID, memory, and unique index/UUID."""
    gpus = []
    for g in message.gpus:
        if not g.uuid or g.memory_bytes == 0:
            raise InventoryFormatError(
                f"node {message.node!r}: GPU index {g.index} has uuid={g.uuid!r} and "
                f"memory_bytes={g.memory_bytes}; both are required"
            )
        gpus.append(GpuInfo(uuid=g.uuid, index=g.index, model=g.model, memory_bytes=g.memory_bytes,
                            sm_count=g.sm_count, healthy=g.health != inventory_pb2.GPU_HEALTH_UNHEALTHY,
                            health_reason=g.health_reason, mps=g.sharing == inventory_pb2.GPU_SHARING_MPS))
    if len({g.uuid for g in gpus}) != len(gpus) or len({g.index for g in gpus}) != len(gpus):
        raise InventoryFormatError(f"node {message.node!r}: GPU UUIDs and indexes must be unique")
    return NodeGpus(gpus=tuple(gpus), simulated=message.simulated, driver_version=message.driver_version,
                    cuda_version=message.cuda_version)
