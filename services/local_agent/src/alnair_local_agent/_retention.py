"""Finished local workloads are forgotten after a while: records and workspaces are bounded.

Every `alnair run` leaves a ``workload_states`` record and a workspace (its output, exit
code, limits). Kept forever, the data directory grew ~13.5 KB per run and every listing
(`alnair ps`) and recovery read every workload that ever ran. A finished workload is kept
for ``retention_seconds`` after it ended, and at most ``keep`` of them (the newest); then
its record is purged and its workspace removed (the rule: alnair_lifecycle's retention).
Running, bound and pending workloads are never touched, nor workloads of other nodes or of
Kubernetes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_lifecycle import TERMINAL, LifecyclePublisher, Retention
from alnair_lifecycle import forget_expired as forget

from ._workspace import Workspace


async def forget_expired(lifecycle: LifecyclePublisher, workloads_dir: Path, node: str,
                         policy: Retention, now: Callable[[], datetime] = lambda: datetime.now(UTC),
                         ) -> int:
    """Purge the records and remove the workspaces of this node's expired local workloads."""
    def finished_here(e: wl.WorkloadEvent) -> bool:
        w = e.workload
        return w.ref.mode == common_pb2.MODE_LOCAL and w.node in (node, "") and w.phase in TERMINAL

    async def remove_workspace(uid: str) -> None:
        shutil.rmtree(Workspace.of(workloads_dir, uid).path, ignore_errors=True)

    return await forget(lifecycle, finished_here, policy, now(), remove_workspace)
