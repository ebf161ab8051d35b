"""What the kubelet's GetPreferredAllocation and Allocate calls get, decided without gRPC.

Preferred allocation steers the kubelet to units of the card the scheduler chose; Allocate
checks the units it got, finds the assignment they belong to (:class:`AssignmentIndex`) and
returns the container's environment and mounts: the card by UUID, the interceptor preloaded,
its limits, the workspace. Every refusal is an exception with the reason; nothing is
allocated by a call that fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alnair_common.cuda_handoff import LIMITS_FILE, interceptor_env
from alnair_gpu import NodeGpus

from ._assignments import Assignment, AssignmentIndex
from ._errors import InvalidDevicesError, NoAssignmentError
from ._units import COMPUTE_UNITS_PER_GPU, Resource, Unit, parse_units, unit_id
from ._workspace import Workspaces, cuda_share


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class ContainerGrant:
    """What one container gets: environment and mounts (converted to protobuf at the edge)."""

    workload_uid: str
    envs: dict[str, str]
    mounts: tuple[MountSpec, ...]


@dataclass(frozen=True)
class ContainerPaths:
    """Where things are on the host and where the container sees them."""

    interceptor_host: Path
    interceptor_container: str = "/usr/local/alnair/lib/libalnair_cuda.so"
    workspace_container: str = "/var/run/alnair"


class Allocator:
    def __init__(self, index: AssignmentIndex, workspaces: Workspaces, paths: ContainerPaths,
                 gpus: Callable[[], NodeGpus]) -> None:
        self.index = index
        self.workspaces = workspaces
        self.paths = paths
        self.gpus = gpus

    def preferred(self, resource: Resource, available: list[str], must_include: list[str], size: int) -> list[str]:
        """``size`` available units of the card the matching assignment names."""
        gpus = self.gpus()
        held = self.index.held_units(resource)
        # The kubelet offers what it believes is free; units we know are held are skipped anyway.
        free = [u for u, d in zip(parse_units(resource, available, gpus), available, strict=True) if d not in held]
        required = parse_units(resource, must_include, gpus)
        waiting = [a for a in self.index.all() if a.needs(resource) and a.amount(resource) == size]
        group = self.index.same_container_first(waiting)
        if not group:
            raise NoAssignmentError(
                f"{resource.resource_name}: no scheduler assignment on this node waits for {size} "
                f"{resource.unit}; was the pod scheduled by alnair-scheduler?")
        if len(group) > 1:
            choices = {(a.gpu_uuid, a.memory_gib, a.compute_percent) for a in group}
            limits = {(m, c) for _, m, c in choices}
            if len(limits) > 1:
                raise NoAssignmentError(
                    f"{resource.resource_name}: {len(group)} assignments wait for {size} {resource.unit} "
                    f"with different limits ({', '.join(a.workload_id for a in group)}); cannot tell "
                    "which pod the kubelet is admitting")
        for assignment in group:
            on_card = sorted(u for u in free if u.uuid == assignment.gpu_uuid)
            if any(u.uuid != assignment.gpu_uuid for u in required):
                continue
            picked = list(required) + [u for u in on_card if u not in required]
            if len(picked) >= size:
                return [unit_id(resource, u.uuid, u.index) for u in picked[:size]]
        raise NoAssignmentError(
            f"{resource.resource_name}: the assigned card {group[0].gpu_uuid} of {group[0].workload_id} has "
            f"fewer than {size} {resource.unit} free among the {len(free)} units offered")

    def allocate(self, resource: Resource, requests: list[list[str]]) -> list[ContainerGrant]:
        """Grants for each container request, all or none."""
        gpus = self.gpus()
        parsed = [self._check(resource, ids, gpus) for ids in requests]
        per_card = Counter(u.uuid for units in parsed for u in units)
        if resource is Resource.COMPUTE:
            over = {uuid: n for uuid, n in per_card.items() if n > COMPUTE_UNITS_PER_GPU}
            if over:
                raise InvalidDevicesError("; ".join(
                    f"{n} % of compute requested on {uuid} in one call; a GPU has {COMPUTE_UNITS_PER_GPU} %"
                    for uuid, n in over.items()))
        held = self.index.held_units(resource)
        taken = [(d, held[d]) for ids in requests for d in ids if d in held]
        if taken:
            d, owner = taken[0]
            raise InvalidDevicesError(
                f"{resource.resource_name}: {len(taken)} requested units are already allocated, e.g. {d} "
                f"to {owner.workload_id}")
        before: list[Assignment] = []
        grants = []
        try:
            for ids, units in zip(requests, parsed, strict=True):
                assignment = self.index.match(resource, units[0].uuid, len(units))
                before.append(assignment)
                assignment = self.index.record_allocation(assignment.uid, resource, ids)
                grants.append(self._grant(assignment))
        except Exception:
            for original in reversed(before):
                self.index.restore(original)
                if not original.started:
                    self.workspaces.remove(original.uid)
            raise
        return grants

    def _check(self, resource: Resource, ids: list[str], gpus: NodeGpus) -> list[Unit]:
        if not ids:
            raise InvalidDevicesError(f"{resource.resource_name}: a container request with no device IDs")
        units = parse_units(resource, ids, gpus)
        cards = sorted({u.uuid for u in units})
        if len(cards) > 1:
            raise InvalidDevicesError(
                f"{resource.resource_name}: one container got units of {len(cards)} GPUs ({', '.join(cards)}); "
                "a share must come from one card")
        gpu = gpus.by_uuid(cards[0])
        if gpu is not None and not gpu.healthy:
            raise InvalidDevicesError(f"{resource.resource_name}: GPU {gpu.uuid} is unhealthy ({gpu.health_reason})")
        return units

    def _grant(self, assignment: Assignment) -> ContainerGrant:
        host_ws = self.workspaces.create(assignment)
        ws = self.paths.workspace_container
        envs = interceptor_env(cuda_share(assignment), workspace=ws,
                               interceptor=self.paths.interceptor_container)
        # The NVIDIA container runtime's name for the card; the interceptor does not read it.
        envs["NVIDIA_VISIBLE_DEVICES"] = assignment.gpu_uuid
        mounts = (
            MountSpec(ws, str(host_ws), read_only=False),
            MountSpec(f"{ws}/{LIMITS_FILE}", str(host_ws / LIMITS_FILE), read_only=True),
            MountSpec(self.paths.interceptor_container, str(self.paths.interceptor_host), read_only=True),
        )
        return ContainerGrant(workload_uid=assignment.uid, envs=envs, mounts=mounts)
