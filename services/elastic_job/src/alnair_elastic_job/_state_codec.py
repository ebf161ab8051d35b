"""JobStatus → the JobState message, and JobCommand → a typed command.

The published JobState carries everything a reader needs without this package: the phase,
its reason and message, when it began and its timeout, the world size and target, restarts
and goodput, and a per-job ``generation`` so a reader can drop a state older than one it
already has (streams replay, consumers redeliver).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import common_pb2, job_pb2

from ._errors import JobSpecError
from ._job_codec import from_proto, to_proto
from ._job_spec import TrainingJob
from ._job_states import DeleteCommand, JobStatus, Phase, ScaleCommand, rendezvous_id, timeout_seconds

PHASE_TO_PROTO = {
    Phase.PENDING: job_pb2.JOB_PHASE_PENDING, Phase.SCHEDULING: job_pb2.JOB_PHASE_SCHEDULING,
    Phase.RUNNING: job_pb2.JOB_PHASE_RUNNING, Phase.RESCALING: job_pb2.JOB_PHASE_SCALING,
    Phase.RECOVERING: job_pb2.JOB_PHASE_RECOVERING, Phase.SUCCEEDED: job_pb2.JOB_PHASE_SUCCEEDED,
    Phase.FAILED: job_pb2.JOB_PHASE_FAILED, Phase.DELETING: job_pb2.JOB_PHASE_DELETING,
    Phase.DELETED: job_pb2.JOB_PHASE_DELETED,
}
_PHASE_FROM_PROTO = {v: k for k, v in PHASE_TO_PROTO.items()}


def _stamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def phase_from_proto(value: int) -> Phase:
    """The phase of a JobState (for the CLI); JobSpecError for a value this table lacks."""
    try:
        return _PHASE_FROM_PROTO[value]
    except KeyError:
        raise JobSpecError("phase", f"JobPhase {value} is not one of this controller's phases "
                           f"({', '.join(p.value for p in Phase)})") from None


def state_to_proto(job: TrainingJob, s: JobStatus, now: float, goodput: float = 0.0) -> job_pb2.JobState:
    return job_pb2.JobState(
        spec=to_proto(job), phase=PHASE_TO_PROTO[s.phase], replicas=s.world_size,
        workers=[common_pb2.WorkloadRef(uid=w) for w in sorted(s.world)],
        message=s.message, observed_at=_stamp(now), reason=s.reason, target_replicas=s.target,
        restarts=s.restarts, goodput_ratio=goodput, entered_at=_stamp(s.entered_at),
        timeout_seconds=timeout_seconds(job, s) or 0.0, generation=s.generation,
        previous_phase=PHASE_TO_PROTO[s.previous] if s.previous else job_pb2.JOB_PHASE_UNSPECIFIED,
        cause=s.cause,
    )


def worker_plan(job: TrainingJob, s: JobStatus, create: int, gang: int) -> job_pb2.WorkerPlan:
    """The WorkerPlan the adapters reconcile to: live workers wanted, which to stop."""
    return job_pb2.WorkerPlan(
        spec=to_proto(job), generation=s.generation, phase=PHASE_TO_PROTO[s.phase],
        target=len(s.alive) + create, gang_min=gang, stop=sorted(s.stopping),
        rendezvous_id=rendezvous_id(job, s), completing=s.completing)


@dataclass(frozen=True)
class Submit:
    job: TrainingJob
    kind: str = "submit"


JobAction = Submit | ScaleCommand | DeleteCommand


def command_from_proto(cmd: job_pb2.JobCommand) -> tuple[str, str, JobAction]:
    """(namespace, name, action) of a JobCommand; JobSpecError (permanent) when unusable."""
    which = cmd.WhichOneof("action")
    namespace = cmd.namespace or "default"
    if which == "submit":
        job = from_proto(cmd.submit)
        if cmd.name and cmd.name != job.name:
            raise JobSpecError("metadata.name", f"the command names job {cmd.name!r} but its spec "
                               f"is {job.name!r}; they must agree")
        return job.namespace, job.name, Submit(job)
    if not cmd.name:
        raise JobSpecError("name", "a scale or delete command must name its job")
    if which == "scale":
        return namespace, cmd.name, ScaleCommand(cmd.scale)
    if which == "delete":
        return namespace, cmd.name, DeleteCommand()
    raise JobSpecError("action", "the command has no action; set submit, scale or delete")
