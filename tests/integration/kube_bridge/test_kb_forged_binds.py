"""Forged bind decisions: kube-bridge binds a pod only to a share committed for it.

The attack (found before the bus authenticated): a BindDecision that the scheduler never
made bound a pod to a card with no room for it. The server now lets only the scheduler
publish decisions; kube-bridge also checks each one against ``gpu_allocations`` (where the
scheduler commits before it decides). A refused decision is answered not ok, counted, logged
and terminated, the pod is not touched, and the scheduler's real decision then binds it.
"""

from __future__ import annotations

import asyncio
import json

from kb_support import alnair_pod, stream_messages
from prometheus_client import REGISTRY
from structlog.testing import capture_logs
from test_kb_lifecycle import decision

from alnair.v1 import common_pb2, platform_pb2, scheduling_pb2
from alnair_common import Bus, subjects
from alnair_common.annotations import GPU_ASSIGNMENT
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import commit_share, publish_decision, release_share
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes

REFUSED = "alnair_kube_bridge_bind_decisions_refused_total"


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value(REFUSED, {"reason": reason}) or 0.0


async def answers(bus: Bus, name: str) -> list[scheduling_pb2.BindResult]:
    return [r for r in await stream_messages(bus, "SCHEDULING", subjects.sched_bound(),
                                             scheduling_pb2.BindResult)
            if r.workload.name == name]


async def refused_and_untouched(bus: Bus, kube: KubeNamespace, name: str, reason: str,
                                before: float, logs: list[dict],
                                errors: list[platform_pb2.ErrorEvent]) -> str:
    """Wait for the refusal; check the answer, the log, the error event and the pod."""
    async def counted() -> bool:
        return refused(reason) > before

    await wait_for(counted, timeout=20, what=f"a decision refused for {reason}")
    [answer] = await wait_for(lambda: answers(bus, name), timeout=10, what="not-ok answer")
    assert not answer.ok and answer.reason
    [entry] = [e for e in logs if e["event"] == "bind decision refused"]
    assert (entry["reason"], entry["pod"]) == (reason, f"{kube.namespace}/{name}")

    async def terminated() -> list[platform_pb2.ErrorEvent]:
        return [e for e in errors if e.message == answer.reason]

    [error] = await wait_for(terminated, timeout=10, what="error event of the terminated decision")
    assert error.permanent and error.subject == subjects.sched_bind()
    pod = await asyncio.to_thread(kube.core.read_namespaced_pod, name, kube.namespace)
    assert not pod.spec.node_name and GPU_ASSIGNMENT not in (pod.metadata.annotations or {})
    return answer.reason


async def error_events(bus: Bus) -> list[platform_pb2.ErrorEvent]:
    errors: list[platform_pb2.ErrorEvent] = []

    async def on_error(_s: str, e: platform_pb2.ErrorEvent) -> None:
        errors.append(e)

    await bus.subscribe(subjects.error("kube-bridge"), platform_pb2.ErrorEvent, on_error)
    await bus.nc.flush()
    return errors


async def bound_by_the_real_decision(bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes,
                                     d: scheduling_pb2.BindDecision) -> None:
    await publish_decision(bus, d)
    name = d.workload.name
    running = await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, name, "Running")
    assert running.spec.node_name == d.assignment.node
    assert json.loads(running.metadata.annotations[GPU_ASSIGNMENT])["gpuUuid"] == d.assignment.gpu_uuid
    assert any(r.ok for r in await answers(bus, name))


async def test_forged_bind_decision_not_in_gpu_allocations_is_refused(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    errors = await error_events(bus)
    await start_bridge()
    [node] = kwok_nodes(1)
    pod = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("victim"))
    with capture_logs() as logs:
        before = refused("not-committed")
        await bus.publish(subjects.sched_bind(), decision(pod, node))
        reason = await refused_and_untouched(bus, kube, "victim", "not-committed", before, logs,
                                             errors)
    assert "no share of that card is committed in gpu_allocations" in reason
    await bound_by_the_real_decision(bus, kube, kwok_nodes, decision(pod, node))


async def test_forged_bind_decision_to_another_node_than_committed_is_refused(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    errors = await error_events(bus)
    await start_bridge()
    here, there = kwok_nodes(2)
    pod = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("victim"))
    real = decision(pod, here)
    await commit_share(bus, real)
    with capture_logs() as logs:
        before = refused("wrong-node")
        await bus.publish(subjects.sched_bind(), decision(pod, there))
        reason = await refused_and_untouched(bus, kube, "victim", "wrong-node", before, logs, errors)
    assert f"the card is committed on node {here!r}, not {there!r}" in reason
    await bound_by_the_real_decision(bus, kube, kwok_nodes, real)


async def test_bind_decision_for_a_card_that_would_be_over_capacity_is_refused(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    """The 160-GiB-on-80 attack: the card already holds 80 GiB and the decision adds 80."""
    errors = await error_events(bus)
    await start_bridge()
    [node] = kwok_nodes(1)
    pod = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("victim", memory_gib=80))
    holder = decision(pod, node, memory=80)
    holder.workload.CopyFrom(common_pb2.WorkloadRef(uid="holder-uid", name="holder",
                                                    namespace=kube.namespace,
                                                    mode=common_pb2.MODE_KUBERNETES))
    await commit_share(bus, holder)
    forged = decision(pod, node, memory=80)
    await commit_share(bus, forged, check_capacity=False)
    with capture_logs() as logs:
        before = refused("over-capacity")
        await bus.publish(subjects.sched_bind(), forged)
        reason = await refused_and_untouched(bus, kube, "victim", "over-capacity", before, logs,
                                             errors)
    assert "add up to 160 GiB and 60 %, over its capacity of 80 GiB and 100 %" in reason
    await release_share(bus, forged.assignment.gpu_uuid, "holder-uid")
    await bound_by_the_real_decision(bus, kube, kwok_nodes, decision(pod, node, memory=80))
