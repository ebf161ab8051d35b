"""Finished local workloads are forgotten after a while: records and workspaces are bounded.

Every `alnair run` leaves a ``workload_states`` record and a workspace (its output, exit
code, limits). Kept forever, the data directory grew ~13.5 KB per run and every listing
(`alnair ps`) and recovery read every workload that ever ran. A finished workload is kept
for ``retention_seconds`` after it ended, and at most ``keep_finished`` of them (the newest);
then its record is purged and its workspace removed. Running, bound and pending workloads are
never touched, nor workloads of other nodes or of Kubernetes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import get_logger
from alnair_lifecycle import TERMINAL, LifecyclePublisher

from ._workspace import Workspace

log = get_logger("alnair.local_agent.retention")


@dataclass(frozen=True)
class Retention:
    retention_seconds: float
    keep_finished: int


def finished_at(event: wl.WorkloadEvent) -> datetime:
    w = event.workload
    stamp = w.finished_at if w.HasField("finished_at") else event.observed_at
    return stamp.ToDatetime(tzinfo=UTC)


def expired(events: list[wl.WorkloadEvent], policy: Retention, now: datetime) -> list[wl.WorkloadEvent]:
    """The finished workloads past ``policy``: too old, or beyond the newest ``keep_finished``."""
    finished = sorted((e for e in events if e.workload.phase in TERMINAL),
                      key=finished_at, reverse=True)
    return [e for i, e in enumerate(finished)
            if i >= policy.keep_finished
            or (now - finished_at(e)).total_seconds() > policy.retention_seconds]


async def forget_expired(lifecycle: LifecyclePublisher, workloads_dir: Path, node: str,
                         policy: Retention, now: Callable[[], datetime] = lambda: datetime.now(UTC),
                         ) -> int:
    """Purge the records and remove the workspaces of this node's expired local workloads."""
    mine = [e for e in await lifecycle.states()
            if e.workload.ref.mode == common_pb2.MODE_LOCAL and e.workload.node in (node, "")]
    gone = expired(mine, policy, now())
    for event in gone:
        uid = event.workload.ref.uid
        await lifecycle.forget(uid)
        shutil.rmtree(Workspace.of(workloads_dir, uid).path, ignore_errors=True)
    if gone:
        log.info("finished workloads forgotten", count=len(gone), kept=len(mine) - len(gone))
    return len(gone)
