"""Pod events → workload events without needless record reads (real nats-server).

Most watch events of a pod are no news; the bridge must drop them without asking the
``workload_states`` bucket, and still publish each transition exactly once when another
bridge (or a restart, with nothing remembered) sees the same pod.
"""

from __future__ import annotations

from typing import Any

from kb_support import workload_events

from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, ensure_streams
from alnair_kube_bridge._watch import Changed
from alnair_kube_bridge._workloads import PodLifecycle
from alnair_lifecycle import LifecyclePublisher

P = wl.WorkloadPhase


def pod(phase: str = "Pending", node: str = "", annotations: dict | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-1",
                         "creationTimestamp": "2026-11-29T00:00:00Z",
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "alnair-scheduler", "nodeName": node,
                     "containers": [{"name": "main", "resources": {"limits": {
                         "alnair/vgpu-memory": "8", "alnair/vgpu-compute": "30"}}}]},
            "status": {"phase": phase, **({"startTime": "2026-11-29T00:00:01Z"}
                                          if phase == "Running" else {})}}


async def counted(bus: Bus) -> tuple[PodLifecycle, list[str]]:
    publisher = await LifecyclePublisher.open(bus, "kube-bridge")
    reads: list[str] = []
    get = publisher.kv.get

    async def counting_get(key: str):  # type: ignore[no-untyped-def]
        reads.append(key)
        return await get(key)

    publisher.kv.get = counting_get  # type: ignore[method-assign]
    return PodLifecycle(publisher, scheduler_name="alnair-scheduler"), reads


async def test_no_news_costs_no_read_and_a_second_bridge_adds_nothing(bus: Bus) -> None:
    await ensure_streams(bus)
    first, reads = await counted(bus)
    await first.handle(Changed("pods", "ADDED", pod()))
    assert len(reads) == 1  # the publisher's own compare-and-set read, no lookup before it
    reads.clear()
    for extra in ({"a": "1"}, {"a": "2"}):  # changes within the phase
        await first.handle(Changed("pods", "MODIFIED", pod(annotations=extra)))
    assert reads == []
    await first.handle(Changed("pods", "MODIFIED", pod(node="n1")))
    await first.handle(Changed("pods", "MODIFIED", pod(node="n1")))  # echo: no news
    assert len(reads) == 1

    # Another bridge, knowing nothing, sees the pod running: it reads the record once and
    # publishes only what is new.
    second, second_reads = await counted(bus)
    await second.handle(Changed("pods", "MODIFIED", pod("Running", node="n1")))
    await first.handle(Changed("pods", "MODIFIED", pod("Running", node="n1")))  # a replica
    events = await workload_events(bus)
    assert [e.workload.phase for e in events] == [
        P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING]
    assert second_reads  # it had to ask

    await first.handle(Changed("pods", "DELETED", pod("Running", node="n1")))
    events = await workload_events(bus)
    assert events[-1].workload.phase == P.WORKLOAD_PHASE_DELETED and len(events) == 4
    # After the last step nothing is remembered; a replay is refused by the record.
    await first.handle(Changed("pods", "MODIFIED", pod("Running", node="n1")))
    assert len(await workload_events(bus)) == 4
