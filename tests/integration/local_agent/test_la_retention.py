"""Finished local workloads are forgotten after their retention: record and workspace gone,
everything still running, bound or pending (and other nodes' and pods') untouched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, ensure_streams
from alnair_lifecycle import LifecyclePublisher, Retention
from alnair_local_agent._retention import forget_expired

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
P = wl.WorkloadPhase


def workload(uid: str, phase: int, *, node: str = "n1", ended_hours_ago: float | None = None,
             mode: int = common_pb2.MODE_LOCAL) -> wl.Workload:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid=uid, name=uid, namespace="local", mode=mode),
                    phase=phase, node=node)
    if ended_hours_ago is not None:
        w.finished_at.FromDatetime(NOW - timedelta(hours=ended_hours_ago))
    return w


async def test_finished_workloads_past_retention_are_forgotten(bus: Bus, tmp_path: Path) -> None:
    await ensure_streams(bus)
    lifecycle = await LifecyclePublisher.open(bus, "local-agent@test")
    workloads = tmp_path / "workloads"
    cases = {
        "old-done": workload("old-done", P.WORKLOAD_PHASE_SUCCEEDED, ended_hours_ago=50),
        "old-failed": workload("old-failed", P.WORKLOAD_PHASE_FAILED, ended_hours_ago=30),
        "recent-1": workload("recent-1", P.WORKLOAD_PHASE_SUCCEEDED, ended_hours_ago=1),
        "recent-2": workload("recent-2", P.WORKLOAD_PHASE_FAILED, ended_hours_ago=2),
        "recent-3": workload("recent-3", P.WORKLOAD_PHASE_SUCCEEDED, ended_hours_ago=3),
        "running": workload("running", P.WORKLOAD_PHASE_RUNNING),
        "pending": workload("pending", P.WORKLOAD_PHASE_PENDING, node=""),
        "other-node": workload("other-node", P.WORKLOAD_PHASE_SUCCEEDED, node="n2",
                               ended_hours_ago=99),
        "a-pod": workload("a-pod", P.WORKLOAD_PHASE_SUCCEEDED, ended_hours_ago=99,
                          mode=common_pb2.MODE_KUBERNETES),
    }
    for uid, w in cases.items():
        await lifecycle.publish(w)
        (workloads / uid).mkdir(parents=True)
        (workloads / uid / "output.log").write_text("x" * 1000)
    policy = Retention(retention_seconds=24 * 3600, keep=2)
    forgotten = await forget_expired(lifecycle, workloads, "n1", policy, now=lambda: NOW)
    # too old: old-done, old-failed; beyond the newest 2 finished: recent-3
    assert forgotten == 3
    left = {e.workload.ref.uid for e in await lifecycle.states()}
    assert left == {"recent-1", "recent-2", "running", "pending", "other-node", "a-pod"}
    assert sorted(p.name for p in workloads.iterdir()) == sorted(left)
    # A second round has nothing more to do.
    assert await forget_expired(lifecycle, workloads, "n1", policy, now=lambda: NOW) == 0
