"""Forged bind decisions: the device plugin keeps only assignments committed for the pod.

The attack (found before the bus authenticated): a BindDecision that the scheduler never made
put a workload on a card with no room for it; the adapters checked only that the card exists
and the size fits one card. The plugin now checks each assignment (from a decision, or from a
pod's assignment annotation on a workload event) against ``gpu_allocations``, where the
scheduler commits before it decides: ``committed_assignment`` refuses, counts and logs.
"""

from __future__ import annotations

import pytest
from dp_harness import CARD0, CARD1, NODE, PluginEnv
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from alnair.v1 import common_pb2, scheduling_pb2, workload_pb2
from alnair_common import Bus, PermanentError, subjects
from alnair_common.allocations import UncommittedShareError
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import commit_share
from alnair_device_plugin._assignments import committed_assignment
from alnair_gpu import SimulatedInventory

REFUSED = "alnair_device_plugin_bind_decisions_refused_total"


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value(REFUSED, {"reason": reason}) or 0.0


def decision(uid: str, memory_gib: int, compute_percent: int = 20, *,
             gpu: str = CARD0) -> scheduling_pb2.BindDecision:
    return scheduling_pb2.BindDecision(
        workload=common_pb2.WorkloadRef(uid=uid, name=f"pod-{uid}", namespace="ml",
                                        mode=common_pb2.MODE_KUBERNETES),
        assignment=common_pb2.GpuAssignment(node=NODE, gpu_uuid=gpu, gpu_index=0,
                                            memory_gib=memory_gib, compute_percent=compute_percent),
        scheduler="alnair-scheduler")


async def refusal(bus: Bus, d: scheduling_pb2.BindDecision, reason: str, **kwargs) -> str:
    before = refused(reason)
    with capture_logs() as logs, pytest.raises(UncommittedShareError) as caught:
        await committed_assignment(bus, d.workload, d.assignment, **kwargs)
    assert caught.value.reason == reason and isinstance(caught.value, PermanentError)
    assert refused(reason) == before + 1
    [entry] = [e for e in logs if e["event"] == "assignment refused"]
    assert (entry["reason"], entry["uid"], entry["gpu"]) == (reason, d.workload.uid, d.assignment.gpu_uuid)
    return str(caught.value)


async def test_forged_bind_decision_not_in_gpu_allocations_is_refused(bus: Bus) -> None:
    forged = decision("forged", 80)
    message = await refusal(bus, forged, "not-committed")
    assert "no share of that card is committed in gpu_allocations" in message
    # Another workload's share on the card does not make it committed for this one.
    await commit_share(bus, decision("other", 8))
    assert "its holders: other" in await refusal(bus, forged, "not-committed")
    # The scheduler's real decision is kept.
    real = decision("real", 8)
    await commit_share(bus, real)
    kept = await committed_assignment(bus, real.workload, real.assignment)
    assert (kept.uid, kept.gpu_uuid, kept.memory_gib, kept.compute_percent) == ("real", CARD0, 8, 20)


async def test_forged_bind_decision_with_other_amounts_than_committed_is_refused(bus: Bus) -> None:
    await commit_share(bus, decision("victim", 8))
    message = await refusal(bus, decision("victim", 80), "wrong-share")
    assert "the committed share is 8 GiB and 20 %" in message
    moved = decision("victim", 8)
    moved.assignment.node = "another-node"
    assert "committed on node 'gpu-node-1'" in await refusal(bus, moved, "wrong-node")


async def test_bind_decision_for_a_card_that_would_be_over_capacity_is_refused(bus: Bus) -> None:
    """The 160-GiB-on-80 attack: the card already holds 80 GiB and the decision adds 80 —
    refused by the bucket's own capacity, and by this node's card when the bucket's value
    claims a capacity the card does not have."""
    gpus = SimulatedInventory.parse("sim:2x80").inventory()
    await commit_share(bus, decision("holder", 80))
    victim = decision("victim", 80)
    await commit_share(bus, victim, check_capacity=False)
    message = await refusal(bus, victim, "over-capacity", gpus=gpus)
    assert "160 GiB and 40 %, over its capacity of 80 GiB and 100 %" in message
    await commit_share(bus, victim, capacity_memory_gib=160)
    assert "over its capacity of 80 GiB" in await refusal(bus, victim, "over-capacity", gpus=gpus)
    # Without the node's cards only the value's own (wrong) capacity is known: that is why
    # the plugin passes its cards.
    await committed_assignment(bus, victim.workload, victim.assignment)


async def test_plugin_does_not_index_a_forged_bind_decision(two_gpu_env: PluginEnv) -> None:
    env = two_gpu_env
    before = refused("not-committed")
    await env.bind("forged", CARD0, 0, memory_gib=80, compute_percent=20, commit=False, wait=False)
    # Decisions are handled in order: once the next one is indexed, the forged one was seen.
    await env.bind("real", CARD1, 1, memory_gib=8, compute_percent=20)
    assert env.service is not None and env.service.index is not None
    assert env.service.index.get("forged") is None
    await wait_for(lambda: _counted(before), timeout=5, what="the refusal counted")


async def test_plugin_does_not_index_an_assignment_annotation_the_scheduler_never_committed(
        two_gpu_env: PluginEnv) -> None:
    """A tenant's pod that names its own card in ``ai.centaurus.io/gpu-assignment``:
    kube-bridge reports the annotation as the workload's assignment."""
    env = two_gpu_env
    before = refused("not-committed")
    forged = decision("annotated", 80)
    event = workload_pb2.WorkloadEvent(source="kube-bridge", sequence=2, workload=workload_pb2.Workload(
        ref=forged.workload, phase=workload_pb2.WORKLOAD_PHASE_BOUND, node=NODE,
        assignment=forged.assignment))
    await env.bus.publish(subjects.workload_events(), event)
    await wait_for(lambda: _counted(before), timeout=5, what="the refusal counted")
    assert env.service is not None and env.service.index is not None
    assert env.service.index.get("annotated") is None


async def _counted(before: float) -> bool:
    return refused("not-committed") > before
