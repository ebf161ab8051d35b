"""The controller's model and the worker facts it reads from the bus."""

from __future__ import annotations

import pytest

import alnair_elastic_job as ej
from alnair.v1 import common_pb2, job_pb2, workload_pb2

JOB = ej.TrainingJob("resnet", ("python", "t.py"), 2, 3, ej.WorkerRequest(whole_gpus=1))
KEY = "default/resnet"
CARDS = [ej.FreeCard("n1", f"g{i}", 80) for i in range(3)]


def worker_event(uid: str, phase: int, *, code: int | None = None, job: str = "resnet",
                 namespace: str = "default") -> workload_pb2.WorkloadEvent:
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(uid=uid, name=uid, namespace="local"),
                              phase=phase, labels={ej.JOB_LABEL: job, ej.JOB_NAMESPACE_LABEL: namespace})
    if code is not None:
        w.exit_code = code
    return workload_pb2.WorkloadEvent(workload=w, source="local-agent@test")


def test_a_job_goes_from_submission_to_running_through_grants_and_worker_facts() -> None:
    c = ej.Controller()
    assert [t.status.phase for t in c.submit(JOB, 0.0)] == [ej.Phase.PENDING]
    assert c.submit(JOB, 1.0) == [], "the same spec again is a redelivery"
    [t] = c.reallocate(CARDS, 2.0)
    assert (t.status.phase, t.status.grant, t.status.target) == (ej.Phase.SCHEDULING, 3, 3)
    assert ej.worker_actions(t) == ej.WorkerActions(3, frozenset(), gang=2), "a gang of min first"
    for uid in ("a", "b", "c"):
        key, event = ej.worker_input(worker_event(uid, workload_pb2.WORKLOAD_PHASE_BOUND))
        assert key == KEY
        c.apply(key, event, 3.0)
        c.apply(*ej.worker_input(worker_event(uid, workload_pb2.WORKLOAD_PHASE_RUNNING)), 3.0)
    assert ej.worker_actions(c.jobs[KEY]).create == 0
    r = job_pb2.RendezvousRound(name="resnet", members=["a", "b", "c"], round=1)
    [t] = c.apply(*ej.rendezvous_input("resnet", r), 4.0)
    assert (t.status.phase, t.status.world_size) == (ej.Phase.RUNNING, 3)
    [t] = c.apply(*ej.worker_input(worker_event("b", workload_pb2.WORKLOAD_PHASE_FAILED, code=137)), 5.0)
    assert (t.status.phase, t.status.reason) == (ej.Phase.RESCALING, "WorkerFailed")
    assert ej.worker_actions(t) == ej.WorkerActions(1, frozenset(), gang=0), "one replacement"


def test_another_spec_for_a_live_job_is_refused_and_a_finished_one_is_forgotten_on_delete() -> None:
    c = ej.Controller()
    c.submit(JOB, 0.0)
    with pytest.raises(ej.JobSpecError, match="delete it first"):
        c.submit(ej.TrainingJob("resnet", ("python", "other.py"), 1, 1, ej.WorkerRequest(whole_gpus=1)), 1.0)
    [t] = c.apply(KEY, ej.DeleteCommand(), 2.0)
    assert t.status.phase is ej.Phase.DELETED
    [last] = c.apply(KEY, ej.DeleteCommand(), 3.0)  # one last status, whose plan removes what is left
    assert KEY not in c.jobs
    assert (last.status.phase, last.status.generation, last.status.cause) == (
        ej.Phase.DELETED, t.status.generation + 1, "delete")
    with pytest.raises(ej.TransitionError, match="no training job default/resnet"):
        c.apply(KEY, ej.ScaleCommand(2), 4.0)
    assert c.apply(KEY, ej.Tick(), 5.0) == []


def test_deleting_a_finished_job_publishes_a_deleted_plan_before_it_is_forgotten() -> None:
    """A finished job keeps its workers' pods for their logs; deleting it must say so to the
    adapters, so its last status (Deleted, one generation on) plans target 0 and is the one
    whose plan removes them."""
    c = ej.Controller()
    c.submit(JOB, 0.0)
    c.reallocate(CARDS, 1.0)
    for uid in ("a", "b", "c"):
        c.apply(*ej.worker_input(worker_event(uid, workload_pb2.WORKLOAD_PHASE_BOUND)), 2.0)
    for uid in ("a", "b", "c"):
        c.apply(*ej.worker_input(worker_event(uid, workload_pb2.WORKLOAD_PHASE_SUCCEEDED)), 3.0)
    done = c.jobs[KEY]
    assert done.status.phase is ej.Phase.SUCCEEDED
    [t] = c.apply(KEY, ej.DeleteCommand(), 4.0)
    assert KEY not in c.jobs, "forgotten"
    s = t.status
    assert (s.phase, s.previous, s.reason, s.generation, s.target, s.world_size) == (
        ej.Phase.DELETED, ej.Phase.SUCCEEDED, "Deleted", done.status.generation + 1, 0, 0)
    assert "after it ended (Succeeded)" in s.message
    from alnair_elastic_job._state_codec import worker_plan
    actions = ej.worker_actions(t)
    plan = worker_plan(t.job, s, actions.create, actions.gang)
    assert (plan.phase, plan.target, plan.generation) == (job_pb2.JOB_PHASE_DELETED, 0, s.generation)


def test_the_allocator_divides_cards_between_jobs_and_the_clock_times_them_out() -> None:
    c = ej.Controller(ej.Hysteresis(0.0, 0.0))
    other = ej.TrainingJob("bert", ("python", "b.py"), 1, 3, ej.WorkerRequest(whole_gpus=1))
    c.submit(JOB, 0.0)
    c.submit(other, 1.0)
    c.reallocate(CARDS, 2.0)
    assert {k: t.status.target for k, t in c.jobs.items()} == {KEY: 2, "default/bert": 1}
    timed_out = c.tick(2.0 + 600.0)
    assert {t.status.reason for t in timed_out} == {"SchedulingTimeout"}


def test_workloads_that_are_not_job_workers_are_skipped_and_bad_ones_refused() -> None:
    plain = workload_pb2.WorkloadEvent(workload=workload_pb2.Workload(
        ref=common_pb2.WorkloadRef(uid="x"), phase=workload_pb2.WORKLOAD_PHASE_RUNNING))
    assert ej.worker_input(plain) is None
    assert ej.worker_input(worker_event("a", workload_pb2.WORKLOAD_PHASE_PENDING)) is None
    no_uid = worker_event("", workload_pb2.WORKLOAD_PHASE_RUNNING)
    with pytest.raises(ej.JobSpecError, match="has no uid"):
        ej.worker_input(no_uid)
    _, lost = ej.worker_input(worker_event("a", workload_pb2.WORKLOAD_PHASE_DELETED))
    assert lost == ej.WorkerExited("a", None, "deleted")
    _, ok = ej.worker_input(worker_event("a", workload_pb2.WORKLOAD_PHASE_SUCCEEDED))
    assert ok == ej.WorkerExited("a", 0, "")
    with pytest.raises(ej.JobSpecError, match="must agree"):
        ej.rendezvous_input("resnet", job_pb2.RendezvousRound(name="bert", round=1))
    with pytest.raises(ej.JobSpecError, match="numbered from 1"):
        ej.rendezvous_input("resnet", job_pb2.RendezvousRound(name="resnet"))


def test_step_reports_read_into_inputs_and_bad_ones_are_refused() -> None:
    key, event = ej.step_input("resnet", job_pb2.StepReport(name="resnet", step=7, step_seconds=1.5))
    assert (key, event) == (KEY, ej.StepReported(7, 1.5))
    with pytest.raises(ej.JobSpecError, match="more than 0 s"):
        ej.step_input("resnet", job_pb2.StepReport(name="resnet", step=7))
    with pytest.raises(ej.JobSpecError, match="must agree"):
        ej.step_input("resnet", job_pb2.StepReport(name="bert", step=7, step_seconds=1.0))
