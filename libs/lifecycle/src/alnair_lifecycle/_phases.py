"""The order of workload phases.

A workload only moves forward: pending → bound → running → succeeded|failed → deleted.
Ranking the phases lets an adapter that replays what it sees (a relist after a restart, a
watch resumed from an older resourceVersion) drop everything that is not news.
"""

from __future__ import annotations

from alnair.v1 import workload_pb2 as wl

PHASE_NAMES: dict[int, str] = {
    wl.WORKLOAD_PHASE_PENDING: "pending",
    wl.WORKLOAD_PHASE_BOUND: "bound",
    wl.WORKLOAD_PHASE_RUNNING: "running",
    wl.WORKLOAD_PHASE_SUCCEEDED: "succeeded",
    wl.WORKLOAD_PHASE_FAILED: "failed",
    wl.WORKLOAD_PHASE_DELETED: "deleted",
}

_RANK: dict[int, int] = {
    wl.WORKLOAD_PHASE_UNSPECIFIED: 0,
    wl.WORKLOAD_PHASE_PENDING: 1,
    wl.WORKLOAD_PHASE_BOUND: 2,
    wl.WORKLOAD_PHASE_RUNNING: 3,
    # Succeeded and failed share a rank: a finished workload never changes its outcome.
    wl.WORKLOAD_PHASE_SUCCEEDED: 4,
    wl.WORKLOAD_PHASE_FAILED: 4,
    wl.WORKLOAD_PHASE_DELETED: 5,
}

TERMINAL = frozenset({wl.WORKLOAD_PHASE_SUCCEEDED, wl.WORKLOAD_PHASE_FAILED,
                      wl.WORKLOAD_PHASE_DELETED})


def rank(phase: int) -> int:
    return _RANK.get(phase, 0)


def is_after(new: int, old: int) -> bool:
    """True when ``new`` is a later lifecycle step than ``old`` (not a replay)."""
    return rank(new) > rank(old)


def phase_name(phase: int) -> str:
    return PHASE_NAMES.get(phase, "unspecified")
