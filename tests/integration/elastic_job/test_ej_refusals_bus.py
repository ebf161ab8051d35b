"""The scheduler's permanent refusals of a job's workers, on a real nats-server: a gang that
can never be placed fails at once, a running job gives up on a refused newcomer, and a
refusal finds its worker's job however the two messages and a controller restart interleave.

The test plays the adapters and the scheduler (ej_support)."""

from __future__ import annotations

import asyncio

import pytest
from ej_support import (
    JOB,
    Observer,
    command,
    early_refusal,
    known_worker,
    last_state_where,
    plan_of,
    refusal,
    start_controller,
    stop_controller,
    worker,
    worker_event,
    workers_started,
)

import alnair_elastic_job as ej
from alnair.v1 import job_pb2, workload_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_lifecycle import STATES_BUCKET, state_key


@pytest.mark.parametrize("order", ["worker first", "refusal first"])
async def test_a_gang_the_scheduler_refuses_for_good_fails_at_once_with_its_reason(
        bus: Bus, controller: ej.ElasticJobService, order: str) -> None:
    """The scheduler's permanent refusal of one worker ends the gang in Failed/Unschedulable
    with the scheduler's words, long before the 600 s scheduling timeout; a refusal that may
    still pass, or one about a whole gang, changes nothing. The refusal and the worker's own
    event come on different streams, so either may be read first."""
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    await command(bus, submit=ej.to_proto(JOB))
    s = await seen.phase(job_pb2.JOB_PHASE_SCHEDULING, "WaitingForGang")
    gang = "default.resnet.1"  # the plan's rendezvous id, as the first test reads it
    for uid in "ab":
        await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_BOUND, rendezvous=gang)
    await refusal(bus, "c", permanent=False)
    await refusal(bus, "c", permanent=True, code="gang-timeout")
    await worker(bus, "old", workload_pb2.WORKLOAD_PHASE_PENDING, rendezvous="default.resnet.0")
    await refusal(bus, "old", permanent=True)
    if order == "worker first":
        await worker(bus, "c", workload_pb2.WORKLOAD_PHASE_PENDING, rendezvous=gang)
        await wait_for(lambda: known_worker(controller, "c"), what="worker c known to the controller")
        await asyncio.sleep(0.5)  # the refusals above have been read by now
        assert seen.states[-1].phase == job_pb2.JOB_PHASE_SCHEDULING, \
            "a passing refusal, a gang's and an earlier gang's worker's change nothing"
        await refusal(bus, "c", permanent=True)
    else:
        await refusal(bus, "c", permanent=True)
        await wait_for(lambda: early_refusal(controller, "c"), what="the refusal of c kept until c is known")
        await worker(bus, "c", workload_pb2.WORKLOAD_PHASE_PENDING, rendezvous=gang)
    s = await seen.phase(job_pb2.JOB_PHASE_FAILED, "Unschedulable")
    assert "worker c" in s.message and "no card has 200 GiB" in s.message and "spec.worker" in s.message
    assert s.cause == "worker-refused"


async def test_a_refused_replacement_is_dropped_and_the_job_finishes_without_waiting_for_it(
        bus: Bus, controller: ej.ElasticJobService) -> None:
    """A running job loses a worker; the scheduler then refuses the replacement for good. The
    job goes on with the two survivors (target 2: no new ask within the restart back-off,
    although every reallocation grants 3) and succeeds once they finish, instead of waiting
    for a worker that will never run."""
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    await bus.subscribe(subjects.wildcard("alnair.cmd.workers.<name>"), job_pb2.WorkerPlan, seen.on_plan)
    await command(bus, submit=ej.to_proto(JOB))
    await seen.phase(job_pb2.JOB_PHASE_SCHEDULING, "WaitingForGang")
    gang = "default.resnet.1"
    for uid in "abc":
        await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_BOUND, rendezvous=gang)
        await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_RUNNING, rendezvous=gang)
    await wait_for(lambda: workers_started(controller, 3), what="three workers started")
    await bus.publish(subjects.job_rendezvous("resnet"),
                      job_pb2.RendezvousRound(name="resnet", round=1, members=list("abc")))
    await seen.phase(job_pb2.JOB_PHASE_RUNNING, "Training")
    await worker(bus, "b", workload_pb2.WORKLOAD_PHASE_FAILED, code=137, rendezvous=gang)
    await seen.phase(job_pb2.JOB_PHASE_SCALING, "WorkerFailed")
    await worker(bus, "d", workload_pb2.WORKLOAD_PHASE_PENDING, rendezvous=gang)
    await wait_for(lambda: known_worker(controller, "d"), what="the replacement d known to the controller")
    await refusal(bus, "d", permanent=True, code="bind-failed")
    s = await wait_for(lambda: last_state_where(seen, lambda s: s.cause == "worker-refused"),
                       what="the refusal of d in the job's state")
    assert "refused worker d" in s.message and "asking for more in 10 s" in s.message
    assert (s.phase, s.target_replicas, s.cause) == (job_pb2.JOB_PHASE_SCALING, 2, "worker-refused")
    plan = await wait_for(lambda: plan_of(seen, s.generation), what="the plan after the refusal")
    assert plan.target == 2
    await asyncio.sleep(1.0)  # ten reallocations, each granting 3
    assert [p.target for p in seen.plans if p.generation > s.generation and p.target > 2] == [], \
        "a newcomer was asked for again within the restart back-off (10 s)"
    await bus.publish(subjects.job_rendezvous("resnet"),
                      job_pb2.RendezvousRound(name="resnet", round=2, members=list("ac"),
                                              rendezvous_id=gang))
    s = await seen.phase(job_pb2.JOB_PHASE_RUNNING, "Training")
    assert [w.uid for w in s.workers] == ["a", "c"]
    for uid in "ac":
        await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_SUCCEEDED, code=0, rendezvous=gang)
    s = await seen.phase(job_pb2.JOB_PHASE_SUCCEEDED, "Succeeded")
    assert "2 workers finished" in s.message


async def test_a_restarted_controller_matches_a_refusal_of_a_worker_it_read_before(
        bus: Bus, nats_server: NatsServer) -> None:
    """The worker events read before a restart are not delivered again, but a pending gang
    member's refusal still ends its gang at once: the restarted controller knows each live
    worker's job from the adapters' workload_states records."""
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    states = await TypedKV.open(bus, STATES_BUCKET, workload_pb2.WorkloadEvent)
    gang = "default.resnet.1"
    first, task = await start_controller(nats_server.url)
    try:
        await command(bus, submit=ej.to_proto(JOB))
        await seen.phase(job_pb2.JOB_PHASE_SCHEDULING, "WaitingForGang")
        for uid, phase in (("a", workload_pb2.WORKLOAD_PHASE_BOUND), ("b", workload_pb2.WORKLOAD_PHASE_BOUND),
                           ("c", workload_pb2.WORKLOAD_PHASE_PENDING)):
            await worker(bus, uid, phase, rendezvous=gang, states=states)
        await wait_for(lambda: known_worker(first, "c"), what="worker c known to the first controller")
    finally:
        await stop_controller(first, task)

    second, task = await start_controller(nats_server.url)
    try:
        await refusal(bus, "c", permanent=True)
        s = await seen.phase(job_pb2.JOB_PHASE_FAILED, "Unschedulable")
        assert "worker c" in s.message and s.cause == "worker-refused"
    finally:
        await stop_controller(second, task)


async def test_a_refusal_read_before_its_worker_event_finds_the_worker_in_its_record(
        bus: Bus, controller: ej.ElasticJobService) -> None:
    """The refusal and the worker's event come on different streams; when the refusal is read
    first, the adapter's workload_states record (written with the event) names the job."""
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    states = await TypedKV.open(bus, STATES_BUCKET, workload_pb2.WorkloadEvent)
    await command(bus, submit=ej.to_proto(JOB))
    await seen.phase(job_pb2.JOB_PHASE_SCHEDULING, "WaitingForGang")
    record = worker_event("c", workload_pb2.WORKLOAD_PHASE_PENDING, rendezvous="default.resnet.1")
    await states.put(state_key("c"), record)  # its event not published (yet)
    await refusal(bus, "c", permanent=True)
    s = await seen.phase(job_pb2.JOB_PHASE_FAILED, "Unschedulable")
    assert "worker c" in s.message and not await early_refusal(controller, "c")


async def test_a_worker_event_read_while_its_refusal_looks_up_the_record_is_not_missed(
        bus: Bus, controller: ej.ElasticJobService, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two streams are read concurrently: the worker's event can be handled while the
    refusal waits for the record lookup (none yet). The refusal must not then be kept for an
    event that already came — the job would wait for the 600 s scheduling timeout. The lookup
    is held open until the event has been handled, so the interleaving is the one CI hit."""
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    await command(bus, submit=ej.to_proto(JOB))
    await seen.phase(job_pb2.JOB_PHASE_SCHEDULING, "WaitingForGang")
    looking_up, event_handled = asyncio.Event(), asyncio.Event()
    lookup = controller._recorded_worker  # noqa: SLF001 - the real lookup, held open

    async def held_lookup(uid: str):  # type: ignore[no-untyped-def]
        found = await lookup(uid)
        if uid == "c":
            looking_up.set()
            await event_handled.wait()
        return found

    monkeypatch.setattr(controller, "_recorded_worker", held_lookup)
    await refusal(bus, "c", permanent=True)
    await asyncio.wait_for(looking_up.wait(), 10)
    await worker(bus, "c", workload_pb2.WORKLOAD_PHASE_PENDING, rendezvous="default.resnet.1")
    await wait_for(lambda: known_worker(controller, "c"), what="worker c known to the controller")
    event_handled.set()
    s = await seen.phase(job_pb2.JOB_PHASE_FAILED, "Unschedulable")
    assert "worker c" in s.message and not await early_refusal(controller, "c")
