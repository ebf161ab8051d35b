"""Bus facts about workers → state-machine inputs, for the workers of training jobs only.

A worker is a workload (pod or local process) that its adapter labels with the job it
belongs to: ``ai.centaurus.io/training-job`` (the name) and
``ai.centaurus.io/training-job-namespace`` (the job's namespace; a local workload's own
namespace is "local", so it cannot say). Workloads without the label are not ours and are
skipped without a word; a labelled one that cannot be read is a permanent error.
"""

from __future__ import annotations

from alnair.v1 import job_pb2, scheduling_pb2, workload_pb2
from alnair_lifecycle import JOB_LABEL, JOB_NAMESPACE_LABEL, RENDEZVOUS_LABEL

from ._controller import job_key
from ._errors import JobSpecError
from ._job_states import (
    JobInput,
    RendezvousComplete,
    StepReported,
    WorkerExited,
    WorkerRefused,
    WorkersPlaced,
    WorkerStarted,
)

_P = workload_pb2


def worker_input(event: workload_pb2.WorkloadEvent) -> tuple[str, JobInput] | None:
    """(job key, input) for a lifecycle event of a job's worker; None for other workloads."""
    w = event.workload
    found = worker_of(w)
    if found is None:
        return None
    key, uid = found[0], w.ref.uid
    if not uid:
        raise JobSpecError("workload.ref.uid", f"worker of training job {w.labels[JOB_LABEL]} from "
                           f"{event.source or '?'} has no uid; adapters must send one")
    if w.phase == _P.WORKLOAD_PHASE_BOUND:
        return key, WorkersPlaced(frozenset({uid}), found[1])
    if w.phase == _P.WORKLOAD_PHASE_RUNNING:
        return key, WorkerStarted(uid)
    if w.phase in (_P.WORKLOAD_PHASE_SUCCEEDED, _P.WORKLOAD_PHASE_FAILED):
        code = w.exit_code if w.HasField("exit_code") else (
            0 if w.phase == _P.WORKLOAD_PHASE_SUCCEEDED else None)
        return key, WorkerExited(uid, code, w.message, w.ref.name)
    if w.phase == _P.WORKLOAD_PHASE_DELETED:
        return key, WorkerExited(uid, None, w.message or "deleted", w.ref.name)
    return None  # pending: nothing to count yet


def worker_of(w: workload_pb2.Workload) -> tuple[str, str] | None:
    """(job key, rendezvous id) of a job's worker; None for other workloads."""
    name = w.labels.get(JOB_LABEL)
    if not name:
        return None
    return (job_key(w.labels.get(JOB_NAMESPACE_LABEL) or w.ref.namespace or "default", name),
            w.labels.get(RENDEZVOUS_LABEL, ""))


def refusal_input(f: scheduling_pb2.SchedulingFailure, worker: tuple[str, str]) -> tuple[str, JobInput]:
    """The input for the scheduler's permanent failure to place ``worker`` (its
    :func:`worker_of`); a failure that retrying may still clear is no input at all."""
    key, rendezvous = worker
    return key, WorkerRefused(f.workload.uid, f.code, f.reason or "no reason given", rendezvous)


def rendezvous_input(subject_name: str, r: job_pb2.RendezvousRound) -> tuple[str, JobInput]:
    if not r.name or r.name != subject_name:
        raise JobSpecError("name", f"rendezvous round names job {r.name!r} on the subject of "
                           f"{subject_name!r}; they must agree")
    if r.round < 1:
        raise JobSpecError("round", f"rendezvous round of job {r.name} has round {r.round}; rounds "
                           "are numbered from 1 so a late or repeated one can be told apart")
    return job_key(r.namespace or "default", r.name), RendezvousComplete(frozenset(r.members), r.round,
                                                                         r.rendezvous_id)


def step_input(subject_name: str, r: job_pb2.StepReport) -> tuple[str, JobInput]:
    if not r.name or r.name != subject_name:
        raise JobSpecError("name", f"step report names job {r.name!r} on the subject of "
                           f"{subject_name!r}; they must agree")
    if not r.step_seconds > 0:
        raise JobSpecError("step_seconds", f"step report of job {r.name} has step_seconds "
                           f"{r.step_seconds}; a step takes more than 0 s")
    return job_key(r.namespace or "default", r.name), StepReported(r.step, r.step_seconds)
