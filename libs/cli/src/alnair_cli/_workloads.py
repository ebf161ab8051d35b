"""What `alnair run`, `ps` and `logs` read: workload records and workspaces."""

from __future__ import annotations

from pathlib import Path

from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus
from alnair_lifecycle import TERMINAL, LifecyclePublisher
from alnair_local_agent import Workspace


async def all_workloads(bus: Bus) -> list[wl.WorkloadEvent]:
    """The last event of every workload, newest first."""
    events = await (await LifecyclePublisher.open(bus, "cli")).states()
    return sorted(events, key=lambda e: (e.workload.created_at.ToNanoseconds(),
                                         e.observed_at.ToNanoseconds()), reverse=True)


def find(events: list[wl.WorkloadEvent], key: str) -> wl.WorkloadEvent | None:
    """By exact name (the newest with it) or by uid prefix (4+ characters)."""
    for e in events:
        if e.workload.ref.name == key:
            return e
    matches = [e for e in events if len(key) >= 4 and e.workload.ref.uid.startswith(key)]
    return matches[0] if len(matches) == 1 else None


def active_with_name(events: list[wl.WorkloadEvent], name: str) -> wl.WorkloadEvent | None:
    for e in events:
        if e.workload.ref.name == name and e.workload.phase not in TERMINAL:
            return e
    return None


def workspace(data_dir: Path, uid: str) -> Workspace:
    return Workspace.of(data_dir / "workloads", uid)
