"""Per-workload workspace directories on the host: what a container's interceptor is handed.

The layout is :func:`alnair_common.cuda_handoff.prepare_container_workspace`'s: the limits
file (naming the workspace as the container sees it), the empty region and the
``ld.so.preload`` file, in a directory only root writes. The Allocate response
(:mod:`._allocator`) mounts them so that the tenant cannot loosen its limits: the limits
file read-only at the interceptor's fixed path, the workspace read-only with only the region
file read-write over it, ``ld.so.preload`` read-only at ``/etc/ld.so.preload``.

The workspaces' root is root's only (:data:`~alnair_common.cuda_handoff.WORKSPACE_ROOT_MODE`):
a region is world-writable (the container's user is not known at Allocate) and must be
reachable through its own container's mount only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from alnair_common.cuda_handoff import WORKSPACE_ROOT_MODE, CudaShare, prepare_container_workspace

from ._assignments import Assignment

WORKSPACE_CONTAINER_PATH = "/var/run/alnair"
INTERCEPTOR_CONTAINER_PATH = "/usr/local/alnair/lib/libalnair_cuda.so"


class Workspaces:
    """Workspaces under ``root``, one per workload UID."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(WORKSPACE_ROOT_MODE)

    def path(self, uid: str) -> Path:
        return self.root / uid

    def create(self, assignment: Assignment, *, container_workspace: str = WORKSPACE_CONTAINER_PATH,
               interceptor: str = INTERCEPTOR_CONTAINER_PATH, mps_pipe_directory: str = "") -> Path:
        """Create (or refresh) the workspace; idempotent (an existing region is kept).

        ``container_workspace`` and ``interceptor``: where the container sees its workspace
        and the library (the Allocate response's mount targets); ``mps_pipe_directory``: MPS
        mode, the card's pipe directory (the same path in the container).
        """
        return prepare_container_workspace(self.path(assignment.uid), cuda_share(assignment, mps_pipe_directory),
                                           container_workspace=container_workspace,
                                           interceptor=interceptor)

    def remove(self, uid: str) -> bool:
        path = self.path(uid)
        if not path.exists():
            return False
        shutil.rmtree(path, ignore_errors=True)
        return not path.exists()

    def existing(self) -> list[str]:
        """Workspace directories; dot-directories (the plugin's own state) are not workspaces."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))


def cuda_share(assignment: Assignment, mps_pipe_directory: str = "") -> CudaShare:
    """What the interceptor gets of a pod's assignment; its identity is ``namespace/name``."""
    return CudaShare(workload_id=assignment.workload_id, gpu_uuid=assignment.gpu_uuid,
                     memory_gib=assignment.memory_gib, compute_percent=assignment.compute_percent,
                     mps_pipe_directory=mps_pipe_directory)
