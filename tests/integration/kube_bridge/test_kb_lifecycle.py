"""kube-bridge against the real control plane and kwok nodes, with a real nats-server.

The scheduler is not part of these tests: they commit each BindDecision's share in
``gpu_allocations`` and publish the decision themselves, in the scheduler's order.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from google.protobuf import json_format
from kb_support import alnair_pod, phases_by_name, stream_messages, workload_events

from alnair.v1 import common_pb2, platform_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, subjects
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import publish_decision
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes
from alnair_lifecycle import rank

P = wl.WorkloadPhase
PENDING, BOUND, RUNNING = P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING
SUCCEEDED, FAILED, DELETED = (P.WORKLOAD_PHASE_SUCCEEDED, P.WORKLOAD_PHASE_FAILED,
                              P.WORKLOAD_PHASE_DELETED)


def decision(pod, node: str, *, gpu: str = "GPU-kwok-0", memory: int = 8,
             compute: int = 30) -> scheduling_pb2.BindDecision:
    d = scheduling_pb2.BindDecision(
        workload=common_pb2.WorkloadRef(uid=pod.metadata.uid, name=pod.metadata.name,
                                        namespace=pod.metadata.namespace,
                                        mode=common_pb2.MODE_KUBERNETES),
        scheduler="test-scheduler")
    d.assignment.node, d.assignment.gpu_uuid, d.assignment.gpu_index = node, gpu, 0
    d.assignment.memory_gib, d.assignment.compute_percent = memory, compute
    d.assignment.filtered_at.GetCurrentTime()
    d.decided_at.GetCurrentTime()
    return d


async def bind_results(bus: Bus) -> list[scheduling_pb2.BindResult]:
    return await stream_messages(bus, "SCHEDULING", subjects.sched_bound(),
                                 scheduling_pb2.BindResult)


async def test_pod_lifecycle_pending_bind_running_succeeded_deleted(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge,
        bridge_kubeconfig: Path) -> None:
    # The bridge runs with the service account of k8s/base/rbac/kube-bridge.yaml only.
    await start_bridge(bridge_kubeconfig)
    [node] = kwok_nodes(1, gpus_per_node=2, gpu_memory_gib=80)
    pod = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("train-0"))

    async def pending():
        return [e for e in await workload_events(bus) if e.workload.phase == PENDING]

    [event] = await wait_for(pending, timeout=20, what="pending event")
    w = event.workload
    assert (w.ref.uid, w.ref.name, w.ref.namespace) == (pod.metadata.uid, "train-0", kube.namespace)
    assert w.ref.mode == common_pb2.MODE_KUBERNETES and w.scheduler_name == "alnair-scheduler"
    assert (w.request.memory_gib, w.request.compute_percent) == (8, 30)
    assert event.sequence == 1 and event.source == "kube-bridge"

    await publish_decision(bus, decision(pod, node, gpu="GPU-aaaa"))
    results = await wait_for(lambda: bind_results(bus), timeout=20, what="bind result")
    assert results[0].ok, results[0].reason
    running = await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "train-0", "Running")
    assert running.spec.node_name == node
    annotation = json.loads(running.metadata.annotations["ai.centaurus.io/gpu-assignment"])
    assert annotation["gpuUuid"] == "GPU-aaaa" and annotation["node"] == node
    assert running.metadata.annotations["ai.centaurus.io/filter-timestamp"].endswith("Z")

    kwok_nodes.finish(kube.namespace, "train-0")
    await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "train-0", "Succeeded")
    kube.core.delete_namespaced_pod("train-0", kube.namespace, grace_period_seconds=0)

    async def deleted():
        events = await workload_events(bus)
        return events if events and events[-1].workload.phase == DELETED else None

    events = await wait_for(deleted, timeout=20, what="deleted event")
    assert [e.workload.phase for e in events] == [PENDING, BOUND, RUNNING, SUCCEEDED, DELETED]
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5]
    bound = events[1].workload
    assert bound.node == node and bound.assignment.gpu_uuid == "GPU-aaaa"
    assert events[3].workload.exit_code == 0 and events[3].workload.HasField("finished_at")


async def test_restart_mid_stream_loses_and_duplicates_nothing(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    [node] = kwok_nodes(1)
    first = await start_bridge()
    for name in ("a", "b", "c"):
        kube.core.create_namespaced_pod(kube.namespace, alnair_pod(name))
    kwok_nodes.bind(kube.namespace, "a", node)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "a", "Running")

    async def seen_running_a():
        return RUNNING in phases_by_name(await workload_events(bus)).get("a", [])

    await wait_for(seen_running_a, timeout=20, what="a running")
    await first.stop()

    # While no bridge watches: a finishes, b is bound and runs, c is deleted, d is created.
    kwok_nodes.finish(kube.namespace, "a", succeeded=False)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "a", "Failed")
    kwok_nodes.bind(kube.namespace, "b", node)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "b", "Running")
    kube.core.delete_namespaced_pod("c", kube.namespace, grace_period_seconds=0)
    kube.core.create_namespaced_pod(kube.namespace, alnair_pod("d"))

    second = await start_bridge()
    expected = {"a": [PENDING, BOUND, RUNNING, FAILED], "b": [PENDING, BOUND, RUNNING],
                "c": [PENDING, DELETED], "d": [PENDING]}

    async def complete():
        got = phases_by_name(await workload_events(bus))
        return got if all(len(got.get(k, [])) >= len(v) for k, v in expected.items()) else None

    await wait_for(complete, timeout=30, what="events after restart")
    # A third bridge, started over the same state, must publish nothing new.
    await second.stop()
    before = await workload_events(bus)
    third = await start_bridge()
    await third.stop()
    events = await workload_events(bus)
    assert len(events) == len(before)
    assert phases_by_name(events) == expected
    for name in expected:  # the sequence is the phase's rank: it grows, whoever publishes
        seqs = [e.sequence for e in events if e.workload.ref.name == name]
        assert seqs == [rank(p) for p in expected[name]], (name, seqs)
    a_failed = [e.workload for e in events if e.workload.ref.name == "a"][-1]
    assert a_failed.exit_code == 1 and a_failed.node == node


async def test_bind_for_missing_pod_is_answered_and_bridge_keeps_working(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    bridge = await start_bridge()
    [node] = kwok_nodes(1)
    errors: list[platform_pb2.ErrorEvent] = []

    async def on_error(_s: str, e: platform_pb2.ErrorEvent) -> None:
        errors.append(e)

    await bus.subscribe(subjects.error("kube-bridge"), platform_pb2.ErrorEvent, on_error)
    ghost = decision(type("P", (), {"metadata": type("M", (), {
        "uid": "0000-ghost", "name": "ghost", "namespace": kube.namespace})()})(), node)
    await publish_decision(bus, ghost)
    [result] = await wait_for(lambda: bind_results(bus), timeout=20, what="bind result")
    assert not result.ok and result.workload.name == "ghost"
    assert "NotFound" in result.reason and "ghost" in result.reason
    await wait_for(lambda: _truthy(errors), timeout=10, what="error event")
    assert errors[0].code == "bind-failed"

    # An impossible decision (compute 250 %) is refused without touching the pod.
    pod = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("real"))
    await bus.publish(subjects.sched_bind(), decision(pod, node, compute=250))
    await publish_decision(bus, decision(pod, node))

    async def three():
        results = await bind_results(bus)
        return results if len(results) >= 3 else None

    results = await wait_for(three, timeout=20, what="three bind results")
    assert not results[1].ok and "250" in results[1].reason
    assert results[2].ok, results[2].reason
    await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "real", "Running")
    assert not bridge.task.done()
    # Replaying the successful decision is harmless: handled as done, its answer (already
    # in the stream, same message id) is not stored twice, no error is raised.
    await publish_decision(bus, decision(pod, node), msg_id="replay-1")
    last = (await bus.js.stream_info("SCHEDULING")).state.last_seq

    async def consumed():
        info = await bus.js.consumer_info("SCHEDULING", "kube-bridge-bind")
        return info.ack_floor.stream_seq >= last - 0 and info.num_ack_pending == 0

    await wait_for(consumed, timeout=20, what="replayed decision handled")
    assert len(await bind_results(bus)) == 3 and len(errors) == 2


async def test_annotation_roundtrip_matches_gpu_assignment_json(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    await start_bridge()
    [node] = kwok_nodes(1)
    pod = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("p"))
    d = decision(pod, node, gpu="GPU-1234", memory=40, compute=50)
    await publish_decision(bus, d)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "p", "Running")

    async def running_event():
        return [e for e in await workload_events(bus) if e.workload.phase == RUNNING]

    [event] = await wait_for(running_event, timeout=20, what="running event")
    assert event.workload.assignment == d.assignment
    raw = kube.core.read_namespaced_pod("p", kube.namespace).metadata.annotations
    parsed = json_format.Parse(raw["ai.centaurus.io/gpu-assignment"],
                               type(d.assignment)())
    assert parsed == d.assignment


async def _truthy(items: list) -> bool:
    return bool(items)
