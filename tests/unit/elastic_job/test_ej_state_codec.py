"""The published JobState and the CLI's JobCommand at the edge."""

from __future__ import annotations

import pytest

import alnair_elastic_job as ej
from alnair.v1 import job_pb2
from alnair_common import subjects

JOB = ej.TrainingJob("resnet", ("python", "t.py"), 2, 4, ej.WorkerRequest(8, 30))


def test_every_phase_has_a_wire_value_and_back() -> None:
    for phase in ej.Phase:
        wire = ej.state_to_proto(JOB, ej.JobStatus(phase, "R", "m", 0.0, 0.0), 1.0).phase
        assert ej.phase_from_proto(wire) is phase
    with pytest.raises(ej.JobSpecError, match="JobPhase 99"):
        ej.phase_from_proto(99)


def test_a_state_carries_reason_timing_world_and_generation() -> None:
    s = ej.submitted(10.0)
    s = ej.step(JOB, s, ej.CapacityChanged(3), 11.0)
    msg = job_pb2.JobState.FromString(ej.state_to_proto(JOB, s, 12.0, goodput=0.5).SerializeToString())
    assert msg.phase == job_pb2.JOB_PHASE_SCHEDULING and msg.reason == "WaitingForGang"
    assert msg.previous_phase == job_pb2.JOB_PHASE_PENDING and msg.cause == "capacity"
    assert (msg.target_replicas, msg.generation, msg.goodput_ratio) == (3, 2, 0.5)
    assert msg.entered_at.ToNanoseconds() == 11_000_000_000 and msg.timeout_seconds == 600.0
    assert ej.from_proto(msg.spec) == JOB
    assert subjects.spec_for(subjects.job_state(JOB.name)).message is job_pb2.JobState


def test_commands_read_into_typed_actions() -> None:
    submit = job_pb2.JobCommand(name="resnet", submit=ej.to_proto(JOB), request_id="r1")
    assert ej.command_from_proto(submit) == ("default", "resnet", ej.Submit(JOB))
    assert ej.command_from_proto(job_pb2.JobCommand(name="resnet", scale=3))[2] == ej.ScaleCommand(3)
    assert ej.command_from_proto(job_pb2.JobCommand(name="resnet", delete=True))[2] == ej.DeleteCommand()
    assert subjects.spec_for(subjects.job_command("resnet")).message is job_pb2.JobCommand


@pytest.mark.parametrize(("cmd", "match"), [
    (job_pb2.JobCommand(name="other", submit=ej.to_proto(JOB)), "must agree"),
    (job_pb2.JobCommand(scale=3), "must name its job"),
    (job_pb2.JobCommand(name="resnet"), "no action"),
    (job_pb2.JobCommand(name="resnet", submit=job_pb2.JobSpec(name="resnet")), "spec.worker"),
])
def test_an_unusable_command_is_a_permanent_error(cmd: job_pb2.JobCommand, match: str) -> None:
    with pytest.raises(ej.JobSpecError, match=match):
        ej.command_from_proto(cmd)


def test_each_gang_started_from_none_gets_a_fresh_rendezvous_id() -> None:
    from alnair_elastic_job._state_codec import worker_plan
    job = ej.TrainingJob("resnet", ("python", "t.py"), 2, 2, ej.WorkerRequest(whole_gpus=1),
                         launcher=ej.Launcher.TORCH)
    s = ej.step(job, ej.submitted(0.0), ej.CapacityChanged(2), 1.0)
    assert worker_plan(job, s, 2, 2).rendezvous_id == "default.resnet.1"
    s = ej.step(job, s, ej.WorkersPlaced(frozenset("ab")), 2.0)
    s = ej.step(job, s, ej.RendezvousComplete(frozenset("ab"), 1), 3.0)
    s = ej.step(job, s, ej.WorkerExited("a", 1), 4.0)      # fixed size: everyone restarts
    plan = worker_plan(job, s, 0, 0)
    assert (plan.target, list(plan.stop)) == (0, ["b"])
    s = ej.step(job, s, ej.Tick(), 100.0)                  # after the back-off: a new gang
    assert s.phase is ej.Phase.SCHEDULING
    assert worker_plan(job, s, 2, 2).rendezvous_id == "default.resnet.2"


def test_a_completing_job_plans_no_new_worker() -> None:
    from alnair_elastic_job._state_codec import worker_plan
    job = ej.TrainingJob("resnet", ("python", "t.py"), 1, 3, ej.WorkerRequest(whole_gpus=1),
                         launcher=ej.Launcher.TORCH_ELASTIC)
    s = ej.step(job, ej.submitted(0.0), ej.CapacityChanged(3), 1.0)
    s = ej.step(job, s, ej.WorkersPlaced(frozenset("abc")), 2.0)
    s = ej.step(job, s, ej.RendezvousComplete(frozenset("abc"), 1), 3.0)
    assert not worker_plan(job, s, 0, 0).completing
    s = ej.step(job, s, ej.WorkerExited("a", 0), 4.0)      # the first to finish
    assert s.reason == "Completing"
    plan = worker_plan(job, s, 0, 0)
    assert plan.completing and plan.target == 2 and not plan.stop
