"""MPS cards (issue #19 §2) on the plain model: the inventory's mode reaches the card, compute
on an MPS card is never over-committed, and the reason says the share is an SM partition."""

from __future__ import annotations

from alnair.v1 import inventory_pb2
from alnair_scheduler._cluster import Cluster
from alnair_scheduler._convert import cards_from_inventory
from alnair_scheduler._datasets import DatasetLocations, placement_reason
from alnair_scheduler._domain import Phase, Profile, Request, Share, Workload, WorkloadId
from alnair_scheduler._placement import NoFit, choose_card

GIB = 1 << 30


def mps_node() -> Cluster:
    inventory = inventory_pb2.NodeInventory(node="n", gpus=[
        inventory_pb2.Gpu(uuid="n-0", index=0, memory_bytes=80 * GIB, vgpu_memory_gib=80,
                          vgpu_compute_percent=100, health=inventory_pb2.GPU_HEALTH_HEALTHY,
                          sharing=inventory_pb2.GPU_SHARING_MPS)])
    c = Cluster()
    c.set_inventory("n", cards_from_inventory(inventory))
    return c


def test_the_inventory_mode_reaches_the_card() -> None:
    [card] = mps_node().nodes["n"].values()
    assert card.card.mps
    time_sliced = inventory_pb2.NodeInventory(node="t", gpus=[
        inventory_pb2.Gpu(uuid="t-0", index=0, memory_bytes=80 * GIB, vgpu_memory_gib=80)])
    assert not cards_from_inventory(time_sliced)[0].mps  # unspecified (an older publisher)


def test_compute_on_an_mps_card_is_never_over_committed() -> None:
    c = mps_node()
    c.add_share("n-0", Share(WorkloadId("a", "a", "ml"), 8, 70))
    got = choose_card(c, Request(8, 40), Profile.COST_SAVING)  # 70 + 40 > 100 %
    assert isinstance(got, NoFit) and got.code == "insufficient-compute", got
    got = choose_card(c, Request(8, 30), Profile.COST_SAVING)  # exactly the rest fits
    assert not isinstance(got, NoFit) and got.card.uuid == "n-0"


def test_the_reason_says_the_share_is_an_sm_partition() -> None:
    c = mps_node()
    [state] = c.nodes["n"].values()
    w = Workload(WorkloadId("b", "b", "ml"), Request(8, 30), Phase.PENDING, "alnair-scheduler", 1, 0.0)
    reason = placement_reason(DatasetLocations(), c, w, state.card, Profile.COST_SAVING, 1.0)
    assert reason.startswith("cost-saving profile chose gpu0 on n (MPS: an SM partition)"), reason
