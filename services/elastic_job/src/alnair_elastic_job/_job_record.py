"""A job's whole status ↔ the TrainingJobRecord kept in the ``training_jobs`` bucket.

The published JobState is for readers; the record is for the controller itself: it holds
every worker set of :class:`JobStatus`, so that a restarted controller counts each worker
exactly as before (a worker reported again after the restart is still one worker) and its
timeouts run on from the same wall-clock instants.
"""

from __future__ import annotations

from alnair.v1 import job_pb2
from alnair_common import subjects

from ._controller import TrackedJob
from ._errors import JobSpecError
from ._job_codec import from_proto
from ._job_states import JobStatus
from ._state_codec import phase_from_proto, state_to_proto

BUCKET = subjects.TRAINING_JOBS_BUCKET


def record_key(namespace: str, name: str) -> str:
    """``<namespace>.<name>``: both DNS-1123 labels, so the key needs no escaping."""
    return f"{namespace}.{name}"


def _seconds(ts: object) -> float:
    return ts.ToNanoseconds() / 1e9  # type: ignore[attr-defined]


def record_to_proto(t: TrackedJob, now: float) -> job_pb2.TrainingJobRecord:
    s = t.status
    rec = job_pb2.TrainingJobRecord(
        state=state_to_proto(t.job, s, now, s.goodput(now)), created_at=s.created_at, grant=s.grant,
        placed=sorted(s.placed), started=sorted(s.started), stopping=sorted(s.stopping),
        ended=sorted(s.ended), heard=sorted(s.heard), heard_round=s.heard_round,
        succeeded=s.succeeded, retry_at=s.retry_at, running_seconds=s.running_seconds,
        incarnation=s.incarnation, step=s.step, slowest_step_seconds=s.slowest_step,
        refusals=s.refusals, grow_after=s.grow_after)
    if s.wish is not None:
        rec.wish = s.wish
    if s.first_run_at is not None:
        rec.first_run_at = s.first_run_at
    if s.last_step_at is not None:
        rec.last_step_at = s.last_step_at
    return rec


def record_from_proto(rec: job_pb2.TrainingJobRecord) -> TrackedJob:
    """The job a record holds; JobSpecError when it cannot be read (the record is skipped)."""
    st = rec.state
    job = from_proto(st.spec)
    placed = frozenset(rec.placed)
    started, stopping = frozenset(rec.started) & placed, frozenset(rec.stopping) & placed
    world = frozenset(w.uid for w in st.workers) & started
    if len(world) != len(st.workers) or not st.generation:
        raise JobSpecError("state", f"record of job {job.namespace}/{job.name} is inconsistent "
                           "(a world member that is not a started worker, or no generation)")
    status = JobStatus(
        phase=phase_from_proto(st.phase), reason=st.reason, message=st.message,
        created_at=rec.created_at, entered_at=_seconds(st.entered_at), generation=st.generation,
        restarts=st.restarts, grant=rec.grant, wish=rec.wish if rec.HasField("wish") else None,
        target=st.target_replicas, placed=placed, started=started, world=world,
        stopping=stopping, ended=frozenset(rec.ended) - placed, heard=frozenset(rec.heard),
        heard_round=rec.heard_round, succeeded=rec.succeeded, retry_at=rec.retry_at,
        running_seconds=rec.running_seconds, incarnation=rec.incarnation, step=rec.step,
        last_step_at=rec.last_step_at if rec.HasField("last_step_at") else None,
        slowest_step=rec.slowest_step_seconds, refusals=rec.refusals, grow_after=rec.grow_after,
        first_run_at=rec.first_run_at if rec.HasField("first_run_at") else None,
        cause=st.cause,
        previous=phase_from_proto(st.previous_phase) if st.previous_phase else None)
    return TrackedJob(job, status)
