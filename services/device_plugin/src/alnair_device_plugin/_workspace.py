"""Per-workload workspace directories on the host: the interceptor's region and limits file.

A workspace is mounted read-write into the container (the interceptor creates its shared
region there). The ``limits`` file inside it is written by the plugin, made read-only and
additionally bind-mounted read-only over itself, so even a root tenant cannot loosen its
limits: the interceptor reads the file and ignores the environment when it exists.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ._assignments import Assignment

GIB = 1 << 30
LIMITS_FILE = "limits"


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
        path.chmod(0o777)
        limits = path / LIMITS_FILE
        if limits.exists():
            limits.chmod(0o644)
        tmp = path / f".{LIMITS_FILE}.tmp"
        tmp.write_text(limits_text(assignment))
        tmp.chmod(0o444)
        os.replace(tmp, limits)
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


def limits_text(assignment: Assignment) -> str:
    """The interceptor's limits file (native/cuda_intercept/README.md); an amount of 0 means
    the pod did not ask for that resource, so the key is left out (no limit)."""
    lines = [f"# written by alnair-device-plugin for {assignment.workload_id} on {assignment.gpu_uuid}"]
    if assignment.memory_gib:
        lines.append(f"memory_bytes = {assignment.memory_gib * GIB}")
    if assignment.compute_percent:
        lines.append(f"compute_percent = {assignment.compute_percent}")
    lines.append(f"workload_id = {assignment.workload_id}")
    return "\n".join(lines) + "\n"
