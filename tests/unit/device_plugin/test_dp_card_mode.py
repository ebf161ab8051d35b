"""The card mode (issue #19 §2) survives the bus: NodeGpus.with_mps → to_proto → from_proto."""

from __future__ import annotations

from alnair.v1 import inventory_pb2
from alnair_gpu import SimulatedInventory, from_proto, to_proto


def test_the_mode_round_trips_through_the_inventory_message() -> None:
    gpus = SimulatedInventory.parse("sim:2x80").inventory()
    assert [g.sharing for g in to_proto(gpus, "n").gpus] == [inventory_pb2.GPU_SHARING_TIME_SLICED] * 2
    message = to_proto(gpus.with_mps(), "n")
    assert [g.sharing for g in message.gpus] == [inventory_pb2.GPU_SHARING_MPS] * 2
    assert all(g.mps for g in from_proto(message).gpus)
    assert not any(g.mps for g in from_proto(to_proto(gpus.with_mps().with_mps(False), "n")).gpus)
