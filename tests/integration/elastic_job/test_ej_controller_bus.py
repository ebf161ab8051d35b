"""The elastic-job controller on a real nats-server: commands, worker facts and rendezvous
rounds in, one JobState per transition out, refused commands as error events, restarts.

The test plays the adapters (their workload events and rendezvous rounds are what
kube-bridge or the local agent will publish) and the user's CLI (JobCommands); the
scheduler's refusals of workers are test_ej_refusals_bus.py's."""

from __future__ import annotations

import asyncio
import contextlib

from ej_support import (
    CARDS,
    JOB,
    Observer,
    command,
    controller_ready,
    first_of,
    plan_of,
    start_controller,
    stop_controller,
    worker,
    workers_started,
)

import alnair_elastic_job as ej
from alnair.v1 import common_pb2, job_pb2, platform_pb2, workload_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for


async def test_a_job_runs_loses_a_worker_and_is_deleted_with_every_transition_published(
        bus: Bus, controller: ej.ElasticJobService, promtool) -> None:  # type: ignore[no-untyped-def]
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    await bus.subscribe(subjects.error("elastic-job"), platform_pb2.ErrorEvent, seen.on_error)
    await bus.subscribe(subjects.wildcard("alnair.cmd.workers.<name>"), job_pb2.WorkerPlan, seen.on_plan)

    await command(bus, submit=ej.to_proto(JOB))
    s = await seen.phase(job_pb2.JOB_PHASE_SCHEDULING, "WaitingForGang")
    assert (s.target_replicas, s.timeout_seconds, s.spec.name) == (3, 600.0, "resnet")
    plan = await wait_for(lambda: plan_of(seen, s.generation), what="the plan of the gang")
    assert (plan.target, plan.gang_min, list(plan.stop), plan.rendezvous_id) == (3, 2, [], "default.resnet.1")
    for uid in "abc":
        await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_BOUND)
        await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_RUNNING)
    await wait_for(lambda: workers_started(controller, 3), what="three workers started")
    await bus.publish(subjects.job_rendezvous("resnet"),
                      job_pb2.RendezvousRound(name="resnet", round=1, members=list("abc")))
    s = await seen.phase(job_pb2.JOB_PHASE_RUNNING, "Training")
    assert s.replicas == 3 and [w.uid for w in s.workers] == list("abc")

    async def exported() -> str | None:
        import httpx
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{controller.http.port}/metrics")).text
        return text if 'alnair_elastic_job_world_size{job="resnet",namespace="default"} 3.0' in text else None

    text = await wait_for(exported, what="world size 3 on /metrics")
    assert 'alnair_elastic_job_goodput_ratio{job="resnet",namespace="default"}' in text
    assert 'alnair_elastic_job_jobs{phase="Running"}' in text
    ours = "\n".join(line for line in text.splitlines() if "alnair_elastic_job_" in line) + "\n"
    assert promtool(ours) == []

    await worker(bus, "b", workload_pb2.WORKLOAD_PHASE_FAILED, code=137)
    s = await seen.phase(job_pb2.JOB_PHASE_SCALING, "WorkerFailed")
    assert (s.replicas, s.restarts, s.previous_phase, s.cause) == (2, 1, job_pb2.JOB_PHASE_RUNNING,
                                                                  "worker-exited")
    plan = await wait_for(lambda: plan_of(seen, s.generation), what="the plan of the replacement")
    assert (plan.target, plan.gang_min, plan.rendezvous_id) == (3, 0, "default.resnet.1"), \
        "one replacement joins the survivors' rendezvous"

    await command(bus, scale=7)
    err = await wait_for(lambda: first_of(seen.errors), what="an error event for the refused scale")
    assert "2..3 workers" in err.message and err.permanent
    assert err.object == "default/resnet", "the refusal names its job's namespace (kube-bridge relays by it)"

    await command(bus, delete=True)
    s = await seen.phase(job_pb2.JOB_PHASE_DELETING, "StoppingWorkers")
    plan = await wait_for(lambda: plan_of(seen, s.generation), what="the plan to stop")
    assert (plan.target, list(plan.stop)) == (0, ["a", "c"])
    for uid in "ac":
        await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_DELETED)
    await seen.phase(job_pb2.JOB_PHASE_DELETED, "Deleted")

    generations = [s.generation for s in seen.states]
    assert generations == list(range(1, len(generations) + 1)), "one state per transition, in order"
    records = await TypedKV.open(bus, "training_jobs", job_pb2.TrainingJobRecord)
    kept = await records.get("default.resnet")
    assert kept is not None and kept.value.state.phase == job_pb2.JOB_PHASE_DELETED
    await command(bus, delete=True)  # deleting a finished job forgets it

    async def forgotten() -> bool:
        return await records.get("default.resnet") is None

    await wait_for(forgotten, what="the record of the deleted job removed")
    # ... after one last state and plan: Deleted, target 0, so the adapters remove whatever
    # the job left (a finished job keeps its workers' pods for their logs until then).
    last = await wait_for(lambda: plan_of(seen, generations[-1] + 1), what="the plan of the forgotten job")
    assert (last.phase, last.target) == (job_pb2.JOB_PHASE_DELETED, 0)
    assert seen.states[-1].generation == last.generation and seen.states[-1].cause == "delete"


async def test_a_bad_submission_is_an_error_event_naming_the_field(bus: Bus,
                                                                   controller: ej.ElasticJobService) -> None:
    seen = Observer()
    await bus.subscribe(subjects.error("elastic-job"), platform_pb2.ErrorEvent, seen.on_error)
    spec = ej.to_proto(JOB)
    spec.min_replicas, spec.max_replicas = 4, 2
    await command(bus, submit=spec)
    err = await wait_for(lambda: first_of(seen.errors), what="an error event")
    assert err.message.startswith("spec.minReplicas") and "minReplicas <= maxReplicas" in err.message
    assert controller.controller.jobs == {}


async def test_under_the_generated_permissions_the_cli_submits_and_reads_the_state(
        secured_nats) -> None:
    """As `alnair up` runs it: elastic-job may read its commands, workers, rendezvous rounds
    and the inventory and allocation buckets, and write states and its records; the cli may
    submit and read; the adapters report workers."""
    settings = ej.ElasticJobSettings(nats_url=secured_nats.server.url, node_name="test", tick_seconds=0.1,
                                     nats_credentials=secured_nats.credentials.seed_file("elastic-job"))
    service = ej.ElasticJobService(settings)  # capacity from the buckets, as deployed
    task = asyncio.create_task(service.run())
    try:
        await wait_for(lambda: controller_ready(service, task), timeout=20, what="elastic-job ready")
        cli = await secured_nats.connect("cli")
        agent = await secured_nats.connect("local-agent")
        from alnair.v1 import inventory_pb2
        inventories = await TypedKV.open(agent, "node_inventory", inventory_pb2.NodeInventory)
        await inventories.put("node1", inventory_pb2.NodeInventory(node="node1", gpus=[
            inventory_pb2.Gpu(uuid=c.uuid, vgpu_memory_gib=80, vgpu_compute_percent=100) for c in CARDS]))
        seen = Observer()
        await cli.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
        await command(cli, submit=ej.to_proto(JOB))
        await seen.phase(job_pb2.JOB_PHASE_SCHEDULING)
        await worker(agent, "a", workload_pb2.WORKLOAD_PHASE_BOUND)
        await worker(agent, "b", workload_pb2.WORKLOAD_PHASE_BOUND)
        await agent.publish(subjects.job_rendezvous("resnet"),
                            job_pb2.RendezvousRound(name="resnet", round=1, members=["a", "b"]))
        s = await seen.phase(job_pb2.JOB_PHASE_RUNNING)
        assert s.replicas == 2
    finally:
        service.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)


async def _two_cards(bus: Bus) -> TypedKV:
    """node1 with two idle 80 GiB cards in node_inventory (the bucket, for more nodes)."""
    from alnair.v1 import inventory_pb2
    inv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
    await inv.put("node1", inventory_pb2.NodeInventory(node="node1", gpus=[
        inventory_pb2.Gpu(uuid=f"GPU-{i}", index=i, vgpu_memory_gib=80, vgpu_compute_percent=100)
        for i in range(2)]))
    return inv


async def test_a_restarted_controller_resumes_each_job_and_counts_no_worker_twice(
        bus: Bus, nats_server: NatsServer) -> None:
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    first, task = await start_controller(nats_server.url)
    try:
        await command(bus, submit=ej.to_proto(JOB))
        await seen.phase(job_pb2.JOB_PHASE_SCHEDULING)
        for uid in "abc":
            await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_BOUND)
        await bus.publish(subjects.job_rendezvous("resnet"),
                          job_pb2.RendezvousRound(name="resnet", round=1, members=list("abc")))
        await seen.phase(job_pb2.JOB_PHASE_RUNNING)
        await worker(bus, "b", workload_pb2.WORKLOAD_PHASE_FAILED, code=1)
        before = await seen.phase(job_pb2.JOB_PHASE_SCALING, "WorkerFailed")
        held = first.controller.jobs["default/resnet"].status
    finally:
        await stop_controller(first, task)

    second, task = await start_controller(nats_server.url)
    try:
        assert second.controller.jobs["default/resnet"].status == held, "resumed as it was left"
        await worker(bus, "b", workload_pb2.WORKLOAD_PHASE_FAILED, code=1)  # the same fact again
        await bus.publish(subjects.job_rendezvous("resnet"),
                          job_pb2.RendezvousRound(name="resnet", round=2, members=list("ac")))
        s = await seen.phase(job_pb2.JOB_PHASE_RUNNING)
        assert (s.replicas, s.restarts) == (2, 1), "the repeated failure used no second restart"
        assert s.generation > before.generation
        with_gen = [m.generation for m in seen.states]
        assert sorted(set(with_gen)) == list(range(1, s.generation + 1)), "no generation skipped"
    finally:
        await stop_controller(second, task)


async def test_without_a_capacity_seam_the_grant_comes_from_the_buckets(bus: Bus, nats_server: NatsServer) -> None:
    """Two cards in node_inventory, one of them fully committed to another workload in
    gpu_allocations: one free card is less than the job's min of 2, so it waits …"""
    from alnair.v1 import allocation_pb2
    await _two_cards(bus)
    alloc = await TypedKV.open(bus, "gpu_allocations", allocation_pb2.CardAllocation)
    await alloc.put("GPU-1", allocation_pb2.CardAllocation(node="node1", gpu_uuid="GPU-1", shares=[
        allocation_pb2.GpuShare(workload=common_pb2.WorkloadRef(uid="someone"), memory_gib=80,
                                compute_percent=100)]))
    service, task = await start_controller(nats_server.url, buckets=True)
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    try:
        await command(bus, submit=ej.to_proto(JOB))

        async def one_free_card() -> bool:
            return [c.uuid for c in service.capacity()] == ["GPU-0"]  # type: ignore[misc]

        await wait_for(one_free_card, what="the buckets seen: one free card")
        await seen.phase(job_pb2.JOB_PHASE_PENDING)
        await asyncio.sleep(0.3)  # a few ticks of the allocator: still nothing to grant
        assert seen.states[-1].phase == job_pb2.JOB_PHASE_PENDING
        assert service.controller.jobs["default/resnet"].status.grant == 0
        # … until the other workload's share is released: then it is granted both cards.
        await alloc.put("GPU-1", allocation_pb2.CardAllocation(node="node1", gpu_uuid="GPU-1"))
        s = await seen.phase(job_pb2.JOB_PHASE_SCHEDULING)
        assert s.target_replicas == 2
    finally:
        await stop_controller(service, task)


async def test_a_job_the_idle_cluster_cannot_hold_is_pending_unschedulable_saying_why(
        bus: Bus, nats_server: NatsServer) -> None:
    """Cards of 80 GiB in node_inventory and workers of 200 GiB: the job waits, as a pod the
    scheduler cannot place does, but its state says what is missing and how to fix it."""
    from alnair.v1 import inventory_pb2
    inv = await _two_cards(bus)
    service, task = await start_controller(nats_server.url, buckets=True)
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    try:
        big = ej.TrainingJob("resnet", ("python", "train.py"), 1, 2, ej.WorkerRequest(200, 30))
        await command(bus, submit=ej.to_proto(big))
        s = await seen.phase(job_pb2.JOB_PHASE_PENDING, "Unschedulable")
        assert "200 GiB and 30 % of one card" in s.message and "the largest 80 GiB" in s.message
        assert "lower spec.worker" in s.message
        # A node with a card large enough joins: the job is granted it and goes on.
        await inv.put("node2", inventory_pb2.NodeInventory(node="node2", gpus=[
            inventory_pb2.Gpu(uuid="GPU-big", index=0, vgpu_memory_gib=256, vgpu_compute_percent=100)]))
        s = await seen.phase(job_pb2.JOB_PHASE_SCHEDULING)
        assert s.target_replicas == 1
    finally:
        await stop_controller(service, task)


async def test_a_job_whose_steps_stop_is_restarted_within_the_stall_window(
        bus: Bus, nats_server: NatsServer) -> None:
    """Steps relayed on alnair.job.<name>.step arm the stall detector; the controller's
    clock is the test's, so the 10 s window passes at once."""
    clock = [1_000_000.0]
    service = ej.ElasticJobService(ej.ElasticJobSettings(nats_url=nats_server.url, node_name="test",
                                                         tick_seconds=0.05),
                                   capacity=lambda: CARDS, clock=lambda: clock[0])
    task = asyncio.create_task(service.run())
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    try:
        await wait_for(lambda: controller_ready(service, task), timeout=20, what="elastic-job ready")
        await command(bus, submit=ej.to_proto(JOB))
        await seen.phase(job_pb2.JOB_PHASE_SCHEDULING)
        for uid in "abc":
            await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_BOUND)
        await bus.publish(subjects.job_rendezvous("resnet"),
                          job_pb2.RendezvousRound(name="resnet", round=1, members=list("abc")))
        await seen.phase(job_pb2.JOB_PHASE_RUNNING)
        await bus.publish(subjects.job_step("resnet"),
                          job_pb2.StepReport(name="resnet", step=1, step_seconds=2.0))

        async def stepped() -> bool:
            return service.controller.jobs["default/resnet"].status.step == 1

        await wait_for(stepped, what="the step report applied")
        clock[0] += 9.0
        await asyncio.sleep(0.2)  # ticks within the window: nothing happens
        assert seen.states[-1].phase == job_pb2.JOB_PHASE_RUNNING
        clock[0] += 2.0
        s = await seen.phase(job_pb2.JOB_PHASE_RECOVERING, "Stalled")
        assert "no training step for 11 s since step 1" in s.message and s.restarts == 1
    finally:
        await stop_controller(service, task)


async def test_a_restart_reading_the_gpu_buckets_preempts_no_running_job(bus: Bus, nats_server: NatsServer) -> None:
    """A restarted controller divides the cards only once it has read both GPU buckets.

    (On loopback the watch is read before the first tick anyway, so this passes without the
    guard too: it pins the restart in bucket mode, not the race itself.)"""
    from alnair.v1 import inventory_pb2
    inv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
    await inv.put("node1", inventory_pb2.NodeInventory(node="node1", gpus=[
        inventory_pb2.Gpu(uuid=c.uuid, vgpu_memory_gib=80, vgpu_compute_percent=100) for c in CARDS]))
    settings = ej.ElasticJobSettings(nats_url=nats_server.url, node_name="test", tick_seconds=0.05)
    seen = Observer()
    await bus.subscribe(subjects.wildcard("alnair.job.<name>.state"), job_pb2.JobState, seen.on_state)
    first = ej.ElasticJobService(settings)
    task = asyncio.create_task(first.run())
    try:
        await wait_for(lambda: controller_ready(first, task), timeout=20, what="elastic-job ready")
        await command(bus, submit=ej.to_proto(JOB))
        await seen.phase(job_pb2.JOB_PHASE_SCHEDULING)
        for uid in "abc":
            await worker(bus, uid, workload_pb2.WORKLOAD_PHASE_BOUND)
        await bus.publish(subjects.job_rendezvous("resnet"),
                          job_pb2.RendezvousRound(name="resnet", round=1, members=list("abc")))
        running = await seen.phase(job_pb2.JOB_PHASE_RUNNING)
    finally:
        await stop_controller(first, task)
    second = ej.ElasticJobService(settings)
    task = asyncio.create_task(second.run())
    try:
        await wait_for(lambda: controller_ready(second, task), timeout=20, what="elastic-job ready again")
        await asyncio.sleep(0.5)  # ten ticks of the allocator after the restart
        t = second.controller.jobs["default/resnet"]
        assert (t.status.phase, t.status.generation) == (ej.Phase.RUNNING, running.generation)
        assert t.status.grant == 3
    finally:
        await stop_controller(second, task)
