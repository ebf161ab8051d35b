"""Per-workload workspace directories on the host: the interceptor's region and limits file.

A workspace is mounted read-write into the container (the interceptor creates its shared
region there). The limits file inside it (:mod:`alnair_common.cuda_handoff`) is written by
the plugin, read-only, and additionally bind-mounted read-only over itself, so even a root
tenant cannot loosen its limits: the interceptor reads the file and ignores the environment
when it exists.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from alnair_common.cuda_handoff import SHARED_WORKSPACE_MODE, CudaShare, write_limits

from ._assignments import Assignment


class Workspaces:
    """Workspaces under ``root``, one per workload UID."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, uid: str) -> Path:
        return self.root / uid

    def create(self, assignment: Assignment) -> Path:
        """Create (or refresh) the workspace with its limits file; idempotent."""
        path = self.path(assignment.uid)
        path.mkdir(exist_ok=True)
        # Containers may run as any user; the region is created by the workload itself.
        path.chmod(SHARED_WORKSPACE_MODE)
        write_limits(path, cuda_share(assignment))
        return path

    def remove(self, uid: str) -> bool:
        path = self.path(uid)
        if not path.exists():
            return False
        shutil.rmtree(path, ignore_errors=True)
        return not path.exists()

    def existing(self) -> list[str]:
        """Workspace directories; dot-directories (the plugin's own state) are not workspaces."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))


def cuda_share(assignment: Assignment) -> CudaShare:
    """What the interceptor gets of a pod's assignment; its identity is ``namespace/name``."""
    return CudaShare(workload_id=assignment.workload_id, gpu_uuid=assignment.gpu_uuid,
                     memory_gib=assignment.memory_gib, compute_percent=assignment.compute_percent)
