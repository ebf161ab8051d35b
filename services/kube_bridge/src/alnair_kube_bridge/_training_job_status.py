"""A JobState (or a refused submission) → the ``status`` of its TrainingJob object.

Pure functions over the object's current status, so what is written is decided in one place
and tested without an apiserver. The status mirrors the controller's state (phase, reason,
message, world size, target, restarts, goodput, when the phase began) and adds conditions in
the Kubernetes style, one per question a user or a tool asks: Scheduling (the job is getting
its workers together: Pending, Scheduling, Rescaling, Recovering), Running, Succeeded,
Failed. A condition's ``lastTransitionTime`` moves only when its status flips; the condition
that is True carries the current reason and message.

Each change of phase or reason is also told as a Kubernetes Event on the object (``event``),
what ``kubectl describe trainingjob`` lists: Warning when the job fails, recovers from a
failure or cannot be placed, Normal otherwise.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import job_pb2

Obj = dict[str, Any]
J = job_pb2
PHASES = {
    J.JOB_PHASE_PENDING: "Pending", J.JOB_PHASE_SCHEDULING: "Scheduling",
    J.JOB_PHASE_RUNNING: "Running", J.JOB_PHASE_SCALING: "Rescaling",
    J.JOB_PHASE_RECOVERING: "Recovering", J.JOB_PHASE_SUCCEEDED: "Succeeded",
    J.JOB_PHASE_FAILED: "Failed", J.JOB_PHASE_DELETING: "Deleting", J.JOB_PHASE_DELETED: "Deleted",
}
TERMINAL = frozenset({"Succeeded", "Failed", "Deleted"})
CONDITIONS = {"Scheduling": {"Pending", "Scheduling", "Rescaling", "Recovering"},
              "Running": {"Running"}, "Succeeded": {"Succeeded"}, "Failed": {"Failed"}}
# The controller refused the submission: another job holds the name, or the spec is invalid.
SUBMIT_REFUSED = "SubmitRefused"
# Phases and reasons told as Warning Events: something a user has to look at.
WARNING_PHASES = frozenset({"Failed", "Recovering"})
WARNING_REASONS = frozenset({"Unschedulable", "Preempted"})


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(ts: Timestamp) -> datetime | None:
    return ts.ToDatetime(tzinfo=UTC) if ts.seconds or ts.nanos else None


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def conditions(old: list[Obj], phase: str, reason: str, message: str, at: str) -> list[Obj]:
    """Every condition for ``phase``; an unchanged False condition is kept as it was."""
    by_type = {c.get("type"): c for c in old}
    out = []
    for kind, phases in CONDITIONS.items():
        status = "True" if phase in phases else "False"
        before = by_type.get(kind)
        if before is not None and before.get("status") == status and status == "False":
            out.append(before)
            continue
        since = before["lastTransitionTime"] if (
            before is not None and before.get("status") == status and before.get("lastTransitionTime")) else at
        out.append({"type": kind, "status": status, "reason": reason or phase,
                    "message": message, "lastTransitionTime": since})
    return out


def from_state(status: Obj, state: job_pb2.JobState, generation: int) -> Obj | None:
    """The status to merge for ``state``, or None when a newer one is already written."""
    if int(status.get("stateGeneration") or 0) >= state.generation:
        return None
    phase = PHASES.get(state.phase, "Unknown")
    observed = stamp(state.observed_at) or datetime.now(UTC)
    entered = rfc3339(stamp(state.entered_at) or observed)
    new: Obj = {
        "phase": phase, "reason": state.reason, "message": state.message,
        "replicas": state.replicas, "targetReplicas": state.target_replicas,
        "restarts": state.restarts, "goodput": round(max(0.0, min(1.0, state.goodput_ratio)), 4),
        "observedGeneration": generation, "stateGeneration": state.generation,
        "lastTransitionTime": entered,
        "conditions": conditions(list(status.get("conditions") or []), phase, state.reason,
                                 state.message, entered),
    }
    if not status.get("startTime"):  # the first state heard: its Pending began at submission
        new["startTime"] = entered if state.previous_phase == J.JOB_PHASE_UNSPECIFIED \
            else rfc3339(observed)
    return new


def refused(status: Obj, message: str, generation: int, when: datetime) -> Obj:
    """The status of a TrainingJob whose submission the controller (or this bridge) refused."""
    at = rfc3339(when)
    return {"phase": "Failed", "reason": SUBMIT_REFUSED, "message": message,
            "observedGeneration": generation, "lastTransitionTime": at,
            "conditions": conditions(list(status.get("conditions") or []), "Failed",
                                     SUBMIT_REFUSED, message, at)}


def event(before: Obj, after: Obj) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event that tells a status change from ``before`` to
    ``after``; None when neither the phase nor the reason changed (a new world size or
    goodput is status, not news)."""
    phase, reason = after.get("phase") or "", after.get("reason") or ""
    if (phase, reason) == (before.get("phase"), before.get("reason")):
        return None
    kind = "Warning" if phase in WARNING_PHASES or reason in WARNING_REASONS else "Normal"
    message = after.get("message") or ""
    return kind, reason or phase, f"{phase}: {message}" if message else phase
