"""Forged workload events: the scheduler refuses what the workload's adapter cannot have sent.

The attack (found before the bus authenticated): a running workload's SUCCEEDED event with
the next sequence, published by someone else, made the scheduler free the card and place a
waiting 80 GiB workload on it — 160 GiB committed on an 80 GiB card. The server now lets
only adapters publish workload events, but any adapter may publish any workload's: the
scheduler checks the sender's node and adapter kind against the workload's share, refuses
with a logged, counted reason, and keeps the share. The real adapter's events still work,
live and when a restarted scheduler replays the history (forged events included).
"""

from __future__ import annotations

from prometheus_client import REGISTRY
from sched_harness import Adapter, Observer, Pod, assert_within_capacity, start_scheduler, stop_scheduler
from structlog.testing import capture_logs

from alnair.v1 import scheduling_pb2, workload_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_scheduler import SchedulerService

REFUSED = "alnair_scheduler_workload_events_refused_total"
SUCCEEDED = workload_pb2.WORKLOAD_PHASE_SUCCEEDED


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value(REFUSED, {"reason": reason}) or 0.0


def cycles() -> float:
    return REGISTRY.get_sample_value("alnair_scheduler_cycle_seconds_count") or 0.0


async def a_cycle_ran(service: SchedulerService) -> None:
    """Return once a placement cycle has started and finished after this call."""
    start = cycles()
    service.engine.kick.set()

    async def probe() -> bool:
        return cycles() >= start + 2

    await wait_for(probe, timeout=10, what="a full scheduling cycle")


async def running_80_and_waiting_80(adapter: Adapter, seen: Observer) -> tuple[Pod, Pod, str]:
    """One 80 GiB card: ``running`` holds all of it (bound, running), ``waiting`` asks for 80."""
    running = await adapter.pending("running", 80, 50)
    (decision,) = await seen.bound(running)
    await adapter.bound(running, decision)
    await adapter.running(running)
    waiting = await adapter.pending("waiting", 80, 50)
    await seen.failed(waiting, "insufficient-memory")
    return running, waiting, decision.assignment.gpu_uuid


async def refusal_seen(reason: str, before: float, count: int = 1) -> None:
    async def probe() -> bool:
        return refused(reason) >= before + count

    await wait_for(probe, timeout=10, what=f"{count} event(s) refused for {reason}")


async def assert_share_kept(bus: Bus, service: SchedulerService, seen: Observer, running: Pod,
                            waiting: Pod, gpu: str) -> None:
    await a_cycle_ran(service)
    cards = await assert_within_capacity(bus)
    assert [s.workload.uid for s in cards[gpu].shares] == [running.uid]
    assert service.engine.cluster.placement_of(running.uid) is not None
    assert waiting.uid not in seen.binds


def refusals(logs: list[dict]) -> list[dict]:
    return [e for e in logs if e["event"] == "implausible workload event refused"]


async def test_forged_succeeded_from_another_node_keeps_the_share_and_the_waiting_80_gib_off_the_card(
        nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        running, waiting, gpu = await running_80_and_waiting_80(adapter, seen)
        with capture_logs() as logs:
            before = refused("wrong-node")
            await adapter.forge(running, SUCCEEDED, node="node-b")
            await refusal_seen("wrong-node", before)
            await assert_share_kept(bus, service, seen, running, waiting, gpu)
        [entry] = refusals(logs)
        assert entry["reason"] == "wrong-node" and entry["uid"] == running.uid
        assert (entry["node"], entry["bound_node"]) == ("node-b", "node-a")
    finally:
        await stop_scheduler(service, task)

    # A restarted scheduler replays the whole history, the forged event included: it is
    # refused again, and the legitimate events around it rebuild the same model.
    before = refused("wrong-node")
    service, task = await start_scheduler(nats_server.url)
    try:
        assert refused("wrong-node") == before + 1
        await assert_share_kept(bus, service, seen, running, waiting, gpu)
        # The real adapter's event (its node, the same next sequence) frees the card.
        await adapter.finish(running)
        (placed,) = await seen.bound(waiting)
        assert placed.assignment.gpu_uuid == gpu
        cards = await assert_within_capacity(bus)
        assert [s.workload.uid for s in cards[gpu].shares] == [waiting.uid]
    finally:
        await stop_scheduler(service, task)


async def test_forged_succeeded_naming_no_node_for_a_running_workload_is_refused(
        nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        running, waiting, gpu = await running_80_and_waiting_80(adapter, seen)
        before = refused("wrong-node")
        await adapter.forge(running, SUCCEEDED, node="")
        await refusal_seen("wrong-node", before)
        await assert_share_kept(bus, service, seen, running, waiting, gpu)
    finally:
        await stop_scheduler(service, task)


async def test_forged_succeeded_from_the_wrong_adapter_kind_is_refused(
        nats_server: NatsServer, bus: Bus) -> None:
    """A pod's events come from kube-bridge: a local agent on the pod's own node (or any
    other source) cannot end it."""
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        running, waiting, gpu = await running_80_and_waiting_80(adapter, seen)
        with capture_logs() as logs:
            before = refused("wrong-source")
            await adapter.forge(running, SUCCEEDED, source="local-agent@node-a")
            await adapter.forge(running, SUCCEEDED, source="")
            await refusal_seen("wrong-source", before, count=2)
            await assert_share_kept(bus, service, seen, running, waiting, gpu)
        assert [(e["reason"], e["source"]) for e in refusals(logs)] == [
            ("wrong-source", "local-agent@node-a"), ("wrong-source", None)]
        await adapter.finish(running)
        (placed,) = await seen.bound(waiting)
        assert placed.assignment.gpu_uuid == gpu
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)


async def test_pod_deleted_before_its_binding_still_frees_its_share(
        nats_server: NatsServer, bus: Bus) -> None:
    """The legitimate event that names no node: kube-bridge reports a pod deleted before the
    Binding went through (it never ran anywhere); its committed share is given back."""
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        gone = await adapter.pending("gone", 80, 50)
        (decision,) = await seen.bound(gone)
        waiting = await adapter.pending("waiting", 80, 50)
        await seen.failed(waiting, "insufficient-memory")
        await adapter.finish(gone, workload_pb2.WORKLOAD_PHASE_DELETED)
        (placed,) = await seen.bound(waiting)
        assert placed.assignment.gpu_uuid == decision.assignment.gpu_uuid
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)



async def test_failed_answer_to_a_forged_decision_does_not_release_the_real_share(
        nats_server: NatsServer, bus: Bus) -> None:
    """An adapter that refuses a forged decision answers not ok, naming the forged amounts:
    that answer is about another decision, and the real share stays (the real decision's
    own failure still releases it and the workload is placed again)."""
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        pod = await adapter.pending("victim", 8, 20)
        (real,) = await seen.bound(pod)
        forged = scheduling_pb2.BindDecision()
        forged.CopyFrom(real)
        forged.assignment.memory_gib = 80
        with capture_logs() as logs:
            await bus.publish(subjects.sched_bound(), scheduling_pb2.BindResult(
                workload=forged.workload, ok=False, reason="not committed",
                assignment=forged.assignment))

            async def ignored() -> bool:
                return any(e["event"] == "bind failure about another decision ignored" for e in logs)

            await wait_for(ignored, timeout=10, what="the forged decision's answer ignored")
        await a_cycle_ran(service)
        cards = await assert_within_capacity(bus)
        assert [s.workload.uid for s in cards[real.assignment.gpu_uuid].shares] == [pod.uid]
        assert seen.bind_count[pod.uid] == 1
        await bus.publish(subjects.sched_bound(), scheduling_pb2.BindResult(
            workload=real.workload, ok=False, reason="the API refused", assignment=real.assignment))

        async def placed_again() -> bool:
            return seen.bind_count[pod.uid] >= 2

        await wait_for(placed_again, timeout=10, what="the workload placed again")
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)
