"""Bad input: every malformed request is rejected with a reason and the scheduler goes on."""

from __future__ import annotations

from sched_harness import Adapter, Observer, committed, start_scheduler, stop_scheduler

from alnair.v1 import commands_pb2, platform_pb2, workload_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for


async def test_invalid_requests_are_rejected_with_reasons_and_placement_goes_on(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 2, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        cases = [
            (await adapter.pending("too-much-compute", 10, 250), "invalid-compute",
             "alnair/vgpu-compute is 250 %, but one card has 100 %"),
            (await adapter.pending("no-memory", 0, 10), "invalid-memory",
             "alnair/vgpu-memory is 0 GiB; ask for at least 1 GiB"),
            # uint32 on the wire: a negative quantity that slipped through arrives huge.
            (await adapter.pending("wrapped-negative", 2**32 - 8, 10), "request-exceeds-card",
             "but the largest card has 80 GiB"),
            (await adapter.pending("two-cards", 120, 100), "request-exceeds-card",
             "never splits it across cards"),
            (await adapter.pending("bad-profile", 10, 10, profile="fastest"), "unknown-profile",
             "scheduling profile 'fastest' is unknown; set ai.centaurus.io/scheduling-profile to one of"),
            (await adapter.pending("no-request", 10, 10, request=False), "no-request",
             "asks for no alnair/vgpu-memory"),
        ]
        for pod, code, text in cases:
            failure, seen_code = await seen.failed(pod, code)
            assert failure.permanent, pod.name
            assert failure.code == code, "the failure names its cause for machines too (elastic-job)"
            assert text in failure.reason, (pod.name, failure.reason)
        ok = await adapter.pending("fine", 10, 10)
        await seen.bound(ok)
        assert not any(p.uid in seen.binds for p, _, _ in cases)
        assert {s.workload.uid for c in (await committed(bus)).values() for s in c.shares} == {ok.uid}
    finally:
        await stop_scheduler(service, task)


async def test_malformed_messages_become_error_events_and_do_not_stop_the_scheduler(
    nats_server: NatsServer, bus: Bus,
) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    errors: list[platform_pb2.ErrorEvent] = []

    async def on_error(_: str, e: platform_pb2.ErrorEvent) -> None:
        errors.append(e)

    await bus.subscribe(subjects.error("scheduler"), platform_pb2.ErrorEvent, on_error)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        await bus.js.publish(subjects.workload_events(), b"\xff\xff not a protobuf")
        no_uid = workload_pb2.WorkloadEvent(workload=workload_pb2.Workload(
            scheduler_name="alnair-scheduler", phase=workload_pb2.WORKLOAD_PHASE_PENDING), sequence=1)
        await bus.publish(subjects.workload_events(), no_uid)
        await bus.publish(subjects.podgroup_events(), commands_pb2.PodGroup(
            ref=commands_pb2.ObjectRef(namespace="default", name="empty"), min_member=0))

        async def three_errors() -> list[str]:
            return [e.message for e in errors] if len(errors) >= 3 else []

        messages = await wait_for(three_errors, what="three error events")
        assert any("cannot decode" in m for m in messages)
        assert any("has no ref.uid" in m for m in messages)
        assert any("minMember 0; it must be at least 1" in m for m in messages)
        pod = await adapter.pending("after-garbage", 10, 10)
        await seen.bound(pod)
        assert not task.done()
    finally:
        await stop_scheduler(service, task)


async def test_workloads_of_other_schedulers_are_left_alone(nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    service, task = await start_scheduler(nats_server.url)
    try:
        other = await adapter.pending("default-scheduled", 10, 10, scheduler="default-scheduler")
        mine = await adapter.pending("mine", 10, 10)
        await seen.bound(mine)
        assert other.uid not in seen.binds and other.uid not in seen.failures
    finally:
        await stop_scheduler(service, task)
