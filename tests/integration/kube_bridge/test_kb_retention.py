"""Deleted pods' lifecycle records are forgotten an hour after the deletion — not at once
(a resumed watch may replay the pod's older events) and never for a pod not deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, ensure_streams
from alnair_kube_bridge._workloads import forget_deleted
from alnair_lifecycle import LifecyclePublisher

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
P = wl.WorkloadPhase


def pod(uid: str, phase: int, *, mode: int = common_pb2.MODE_KUBERNETES,
        finished_days_ago: float | None = None) -> wl.Workload:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid=uid, name=uid, namespace="team", mode=mode),
                    phase=phase, node="n1")
    if finished_days_ago is not None:
        w.finished_at.FromDatetime(NOW - timedelta(days=finished_days_ago))
    return w


async def test_deleted_pods_are_forgotten_an_hour_after_their_deletion(bus: Bus) -> None:
    await ensure_streams(bus)
    bridge = await LifecyclePublisher.open(bus, "kube-bridge")
    cases = [
        # (workload, when its last event was observed)
        (pod("deleted-2h-ago", P.WORKLOAD_PHASE_DELETED), NOW - timedelta(hours=2)),
        # finished days ago but deleted only now: counted from the deletion, kept
        (pod("deleted-just-now", P.WORKLOAD_PHASE_DELETED, finished_days_ago=3),
         NOW - timedelta(minutes=5)),
        (pod("succeeded-not-deleted", P.WORKLOAD_PHASE_SUCCEEDED, finished_days_ago=3),
         NOW - timedelta(days=3)),
        (pod("running", P.WORKLOAD_PHASE_RUNNING), NOW - timedelta(days=3)),
        (pod("a-local-one", P.WORKLOAD_PHASE_DELETED, mode=common_pb2.MODE_LOCAL),
         NOW - timedelta(days=3)),
    ]
    for workload, observed in cases:
        await bridge.publish(workload, observed_at=observed)
    assert await forget_deleted(bridge, 3600, NOW) == 1
    left = {e.workload.ref.uid for e in await bridge.states()}
    assert left == {"deleted-just-now", "succeeded-not-deleted", "running", "a-local-one"}
    assert await forget_deleted(bridge, 3600, NOW + timedelta(hours=1)) == 1  # now its turn
    assert "deleted-just-now" not in {e.workload.ref.uid for e in await bridge.states()}
