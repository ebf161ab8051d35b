"""The free cards the allocator divides: inventory less other workloads' committed shares."""

from __future__ import annotations

from alnair.v1 import allocation_pb2, common_pb2, inventory_pb2
from alnair_elastic_job import FreeCard
from alnair_elastic_job._capacity import free_cards

GIB = 1024**3


def inventory(node: str, *gpus: inventory_pb2.Gpu) -> inventory_pb2.NodeInventory:
    return inventory_pb2.NodeInventory(node=node, gpus=list(gpus))


def share(uid: str, mem: int, comp: int) -> allocation_pb2.GpuShare:
    return allocation_pb2.GpuShare(workload=common_pb2.WorkloadRef(uid=uid), memory_gib=mem,
                                   compute_percent=comp)


def test_other_workloads_shares_are_taken_off_and_the_jobs_own_are_not() -> None:
    inv = inventory("n1", inventory_pb2.Gpu(uuid="G0", memory_bytes=80 * GIB),
                    inventory_pb2.Gpu(uuid="G1", vgpu_memory_gib=40, vgpu_compute_percent=50),
                    inventory_pb2.Gpu(uuid="G2", memory_bytes=80 * GIB,
                                      health=inventory_pb2.GPU_HEALTH_UNHEALTHY),
                    inventory_pb2.Gpu(uuid="G3", memory_bytes=80 * GIB))
    allocs = {"G0": allocation_pb2.CardAllocation(gpu_uuid="G0", shares=[share("other", 20, 30),
                                                                         share("worker-1", 10, 20)]),
              "G3": allocation_pb2.CardAllocation(gpu_uuid="G3", shares=[share("full", 80, 100)])}
    assert free_cards([inv], allocs, frozenset({"worker-1"})) == [
        FreeCard("n1", "G0", 60, 70), FreeCard("n1", "G1", 40, 50)]
