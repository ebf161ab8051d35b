"""The node's GPUs: NVML on a real machine, or a simulated inventory (``sim:2x80``).

Published on ``alnair.node.<node>.inventory`` and into the ``node_inventory`` bucket (key =
node name), with ``simulated`` set when the GPUs are not real, so every consumer can say so.
"""

from __future__ import annotations

from alnair.v1 import inventory_pb2
from alnair_common import Bus, ConfigError, TypedKV, subjects
from alnair_gpu import GpuError, NodeGpus, NvmlInventory, SimulatedInventory, to_proto


def discover(spec: str) -> NodeGpus:
    """The GPUs named by ``spec`` ("" = this machine's, via NVML; "sim:2x80" = simulated)."""
    try:
        if spec:
            return SimulatedInventory.parse(spec).inventory()
        source = NvmlInventory()
        try:
            return source.inventory()
        finally:
            source.close()
    except GpuError as e:
        hint = ("" if spec else " — on a machine without a GPU start with a simulated one: "
                "`alnair up --gpus sim:2x80` (ALNAIR_GPUS=sim:2x80)")
        raise ConfigError(f"GPU discovery failed: {e}{hint}") from e


async def publish_inventory(bus: Bus, node: str, gpus: NodeGpus) -> inventory_pb2.NodeInventory:
    message = to_proto(gpus, node)
    await bus.publish(subjects.node_inventory(node), message)
    kv = await TypedKV.open(bus, subjects.NODE_INVENTORY_BUCKET, inventory_pb2.NodeInventory)
    await kv.put(subjects.token(node), message)
    return message
