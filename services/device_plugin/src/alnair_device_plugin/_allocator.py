"""What the kubelet's GetPreferredAllocation and Allocate calls get, decided without gRPC.

Preferred allocation steers the kubelet to units of the card the scheduler chose; Allocate
checks the units it got, finds the assignment they belong to (:class:`AssignmentIndex`) and
returns the container's environment and mounts: the card by UUID, the interceptor preloaded,
its limits, the workspace. Every refusal is an exception with the reason; nothing is
allocated by a call that fails.

The mounts are what keeps a hostile tenant inside its limits (the environment cannot: the
tenant controls it):

* the limits file, read-only, at the interceptor's compiled-in path
  (:data:`~alnair_common.cuda_handoff.FIXED_LIMITS_PATH`); it names the workspace;
* the workspace, read-only, and over it its region file, read-write: the tenant writes its
  region but cannot delete, replace or add a file (the region is the ledger's anchor);
* ``/etc/ld.so.preload``, read-only, naming the library: every dynamically linked process of
  the container loads it, whether or not ``LD_PRELOAD`` survives;
* the library itself, read-only;
* MPS mode: the card's MPS pipe directory, read-only, at the same path, which the limits
  file names (``mps_pipe_directory``), so the interceptor connects the container to the
  card's control daemon with its share as MPS limits. Connecting to a unix socket needs no
  writable mount (the kernel's read-only check is for files, directories and links), and a
  read-only one keeps the tenant from deleting or replacing the sockets every container of
  the card shares.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alnair_common.cuda_handoff import (
    FIXED_LIMITS_PATH,
    LD_SO_PRELOAD_FILE,
    LD_SO_PRELOAD_PATH,
    LIMITS_FILE,
    REGION_FILE,
    interceptor_env,
)
from alnair_gpu import NodeGpus

from ._assignments import Assignment, AssignmentIndex
from ._errors import InvalidDevicesError, NoAssignmentError
from ._units import COMPUTE_UNITS_PER_GPU, Resource, Unit, parse_units, unit_id
from ._workspace import INTERCEPTOR_CONTAINER_PATH, WORKSPACE_CONTAINER_PATH, Workspaces, cuda_share


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
    """Where things are on the host and where the container sees them.

    ``limits_container`` must be the path compiled into the interceptor (tests that run a
    test build of it pass that build's path).
    """

    interceptor_host: Path
    interceptor_container: str = INTERCEPTOR_CONTAINER_PATH
    workspace_container: str = WORKSPACE_CONTAINER_PATH
    limits_container: str = FIXED_LIMITS_PATH
    ld_so_preload_container: str = LD_SO_PRELOAD_PATH


class Allocator:
    def __init__(self, index: AssignmentIndex, workspaces: Workspaces, paths: ContainerPaths,
                 gpus: Callable[[], NodeGpus], mps_pipe_directory: Callable[[str], str] | None = None) -> None:
        """``mps_pipe_directory``: MPS mode, a card's pipe directory by GPU UUID."""
        self.index = index
        self.workspaces = workspaces
        self.paths = paths
        self.gpus = gpus
        self.mps_pipe_directory = mps_pipe_directory

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
        paths = self.paths
        ws = paths.workspace_container
        pipe = self.mps_pipe_directory(assignment.gpu_uuid) if self.mps_pipe_directory else ""
        host_ws = self.workspaces.create(assignment, container_workspace=ws,
                                         interceptor=paths.interceptor_container, mps_pipe_directory=pipe)
        envs = interceptor_env(cuda_share(assignment), workspace=ws, interceptor=paths.interceptor_container)
        # The NVIDIA container runtime's name for the card; the interceptor does not read it.
        envs["NVIDIA_VISIBLE_DEVICES"] = assignment.gpu_uuid
        # Parents before children: the runtimes mount in order of path depth.
        mounts = (
            MountSpec(ws, str(host_ws), read_only=True),
            MountSpec(f"{ws}/{REGION_FILE}", str(host_ws / REGION_FILE), read_only=False),
            MountSpec(paths.limits_container, str(host_ws / LIMITS_FILE), read_only=True),
            MountSpec(paths.ld_so_preload_container, str(host_ws / LD_SO_PRELOAD_FILE), read_only=True),
            MountSpec(paths.interceptor_container, str(paths.interceptor_host), read_only=True),
        ) + ((MountSpec(pipe, pipe, read_only=True),) if pipe else ())
        return ContainerGrant(workload_uid=assignment.uid, envs=envs, mounts=mounts)
