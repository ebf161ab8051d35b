"""The device plugin and the local agent hand one bind decision to the interceptor
identically: the same limits file (same mode, the same lines but for the container's
``workspace`` line, which only the fixed file of container mode carries) and the same
interceptor environment, including for an amount of 0 (no limit: no key, no variable).

The workload's identity is each adapter's own (a pod's ``namespace/name``, a local
workload's uid); both are given the pod's here so that everything else can be compared.
The local agent refuses a compute share of 0 before it gets this far (a local workload
asks for 1..100 %); its hand-off path is still held to the same answer."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from alnair.v1 import common_pb2
from alnair_device_plugin import (
    Allocator,
    AssignmentIndex,
    ContainerPaths,
    Resource,
    Workspaces,
    assignment_from_proto,
    unit_id,
)
from alnair_gpu import SimulatedInventory
from alnair_local_agent import Workspace, cuda_share, workload_env

GPUS = SimulatedInventory.parse("sim:2x16").inventory()
CARD = GPUS.gpus[1]


def decision(memory_gib: int, compute_percent: int) -> tuple[common_pb2.WorkloadRef, common_pb2.GpuAssignment]:
    return (common_pb2.WorkloadRef(uid="u-1", name="train-0", namespace="ml"),
            common_pb2.GpuAssignment(node="n1", gpu_uuid=CARD.uuid, gpu_index=CARD.index,
                                     memory_gib=memory_gib, compute_percent=compute_percent))


@pytest.mark.parametrize(("memory_gib", "compute_percent"), [(8, 30), (0, 30), (8, 0)])
def test_both_adapters_hand_the_interceptor_the_same_limits(tmp_path: Path, memory_gib: int,
                                                            compute_percent: int) -> None:
    ref, gpu = decision(memory_gib, compute_percent)
    interceptor = tmp_path / "libalnair_cuda.so"
    local = Workspace(tmp_path / "local" / ref.uid)
    local.path.mkdir(parents=True)

    # The device plugin, as the kubelet's Allocate reaches it; the container sees the same
    # paths as the local process, so the environments can be compared whole.
    assignment = assignment_from_proto(ref, gpu)
    index = AssignmentIndex(tmp_path / "state")
    index.add(assignment)
    allocator = Allocator(index, Workspaces(tmp_path / "pods"),
                          ContainerPaths(interceptor_host=interceptor, interceptor_container=str(interceptor),
                                         workspace_container=str(local.path)),
                          gpus=lambda: GPUS)
    resource = Resource.MEMORY if memory_gib else Resource.COMPUTE
    amount = memory_gib or compute_percent
    (grant,) = allocator.allocate(resource, [[unit_id(resource, CARD.uuid, k) for k in range(amount)]])
    pod_limits = tmp_path / "pods" / ref.uid / "limits"

    # The local agent, as its bind handler does it.
    share = cuda_share(gpu, assignment.workload_id)
    local.write_limits(share)
    local_env = workload_env({}, share, workspace=local, interceptor=interceptor)
    local_limits = local.path / "limits"

    pod_lines = pod_limits.read_text().splitlines()
    assert pod_lines[-1] == f"workspace = {local.path}"  # container mode: the workspace's one source
    assert local_limits.read_text().splitlines() == pod_lines[:-1]
    assert stat.S_IMODE(local_limits.stat().st_mode) == stat.S_IMODE(pod_limits.stat().st_mode) == 0o444
    pod_env = dict(grant.envs)
    assert pod_env.pop("NVIDIA_VISIBLE_DEVICES") == CARD.uuid  # for the container runtime only
    assert local_env == pod_env

    text = local_limits.read_text()
    assert ("memory_bytes" in text, "compute_percent" in text) == (bool(memory_gib), bool(compute_percent))
    assert ("ALNAIR_VGPU_MEMORY_BYTES" in pod_env, "ALNAIR_VGPU_COMPUTE_PERCENT" in pod_env) == \
        (bool(memory_gib), bool(compute_percent))
