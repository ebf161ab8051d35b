"""A CacheDatasetStatus (or what the pods say) → the ``status`` of its Dataset object.

Pure functions over the object's current status, so what is written is decided in one place
and tested without an apiserver. The status mirrors the hydrator's (phase, reason, message,
bytes and files, dedup savings, progress) and adds conditions, one per question a user or a
tool asks:

* Ready — can readers hit the tier? False with the hydrator's reason (``source-unreachable``
  → ``SourceUnreachable``) when it failed or was evicted.
* Hydrating — is the hydrator at work on it (Pending or Hydrating)?
* InUse — which running pods read it (from their annotations).
* DeletionDeferred — the Dataset was deleted while pods read it; it goes when they end.

A condition's ``lastTransitionTime`` moves only when its status flips. A report older than
the one written (``observedAt``) is dropped: the stream may redeliver.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from alnair.v1 import cache_pb2

from ._training_job_status import parse_time, rfc3339, stamp

Obj = dict[str, Any]
C = cache_pb2
PHASES = {C.CACHE_PHASE_PENDING: "Pending", C.CACHE_PHASE_HYDRATING: "Hydrating",
          C.CACHE_PHASE_READY: "Ready", C.CACHE_PHASE_FAILED: "Failed",
          C.CACHE_PHASE_EVICTED: "Evicted", C.CACHE_PHASE_REMOVED: "Removed"}
HYDRATING = frozenset({"Pending", "Hydrating"})
# Pod names a condition's message lists before it says "and N more".
SHOWN_PODS = 10


def camel(code: str) -> str:
    """``source-unreachable`` → ``SourceUnreachable`` (a condition's reason is CamelCase)."""
    return "".join(part[:1].upper() + part[1:] for part in code.replace("_", "-").split("-") if part)


def binary_bytes(n: int) -> str:
    """``1288490188`` → ``1.2Gi`` (the units kubectl users read quantities in)."""
    if n < 1024:
        return f"{n}B"
    value = float(n)
    for unit in ("Ki", "Mi", "Gi", "Ti", "Pi"):
        value /= 1024
        if value < 1024 or unit == "Pi":
            return f"{value:.1f}{unit}"
    raise AssertionError("unreachable")


def with_condition(old: list[Obj], kind: str, status: bool, reason: str, message: str,
                   at: str) -> list[Obj]:
    """``old`` with condition ``kind`` set; its transition time kept if its status stays."""
    value = "True" if status else "False"
    out = [c for c in old if c.get("type") != kind]
    before = next((c for c in old if c.get("type") == kind), None)
    since = before["lastTransitionTime"] if (
        before is not None and before.get("status") == value and before.get("lastTransitionTime")) else at
    out.append({"type": kind, "status": value, "reason": reason, "message": message,
                "lastTransitionTime": since})
    return sorted(out, key=lambda c: str(c.get("type")))


def from_cache_status(status: Obj, report: cache_pb2.CacheDatasetStatus) -> Obj | None:
    """The status to merge for the hydrator's ``report``, or None when a newer one is written."""
    observed = stamp(report.observed_at)
    written = parse_time(status.get("observedAt"))
    if observed is None or (written is not None and observed <= written):
        return None
    phase = PHASES.get(report.phase, "Pending")
    at = rfc3339(observed)
    reason = camel(report.reason) or phase
    conditions = list(status.get("conditions") or [])
    ready = phase == "Ready"
    conditions = with_condition(conditions, "Ready", ready, "Hydrated" if ready else reason,
                                report.message, at)
    conditions = with_condition(conditions, "Hydrating", phase in HYDRATING,
                                phase if phase in HYDRATING else reason, report.message, at)
    return {
        "phase": phase, "reason": report.reason, "message": report.message,
        "totalBytes": report.total_bytes, "cachedBytes": report.cached_bytes,
        "filesTotal": report.files_total, "filesCached": report.files_cached,
        "dedupSavedBytes": report.dedup_saved_bytes, "uniqueBytes": report.unique_bytes,
        "progress": round(max(0.0, min(1.0, report.progress)), 4),
        "cached": f"{binary_bytes(report.cached_bytes)}/{binary_bytes(report.total_bytes)}",
        "nodes": list(report.nodes), "requestId": report.request_id,
        # Kept to the microsecond: the hydrator reports several times a second.
        "observedAt": observed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "conditions": conditions,
    }


def requested(status: Obj, generation: int, request_id: str, when: datetime) -> Obj:
    """The status of a Dataset whose spec (generation) was just sent to the hydrator."""
    at = rfc3339(when)
    out: Obj = {"observedGeneration": generation, "requestId": request_id}
    if not status.get("phase"):
        message = "sent to the cache hydrator; waiting for its first report"
        out |= {"phase": "Pending", "message": message, "conditions": with_condition(
            with_condition(list(status.get("conditions") or []), "Hydrating", True, "Requested",
                           message, at), "Ready", False, "Requested", message, at)}
    return out


def refused(status: Obj, generation: int, message: str, when: datetime) -> Obj:
    """The status of a Dataset the bridge cannot send (only one the schema did not check)."""
    at = rfc3339(when)
    return {"phase": "Failed", "reason": "invalid-spec", "message": message,
            "observedGeneration": generation,
            "conditions": with_condition(list(status.get("conditions") or []), "Ready", False,
                                         "InvalidSpec", message, at)}


def pods_phrase(pods: list[str]) -> str:
    shown = ", ".join(sorted(pods)[:SHOWN_PODS])
    more = len(pods) - SHOWN_PODS
    return shown + (f" and {more} more" if more > 0 else "")


def usage(status: Obj, pods: list[str], *, deleting: bool, when: datetime) -> Obj | None:
    """InUse (and, for a deleted Dataset, DeletionDeferred) for the pods that read it now;
    None when the conditions already say so."""
    at = rfc3339(when)
    old = list(status.get("conditions") or [])
    if pods:
        message = f"read by running pod{'s' if len(pods) > 1 else ''} {pods_phrase(pods)}"
        new = with_condition(old, "InUse", True, "PodsReading", message, at)
    else:
        new = with_condition(old, "InUse", False, "NoPods", "no running pod reads it", at)
    if deleting:
        message = (f"deletion waits until no running pod reads the data set: {pods_phrase(pods)}"
                   if pods else "no running pod reads it any more; removing it from the cache")
        new = with_condition(new, "DeletionDeferred", bool(pods),
                             "PodsReading" if pods else "NoPods", message, at)
    return None if _same(old, new) else {"conditions": new}


def _same(a: list[Obj], b: list[Obj]) -> bool:
    def key(conditions: list[Obj]) -> set[tuple[str, str, str]]:
        return {(str(c.get("type")), str(c.get("status")), str(c.get("message"))) for c in conditions}
    return key(a) == key(b)
