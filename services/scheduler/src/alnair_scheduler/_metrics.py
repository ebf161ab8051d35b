"""Prometheus metrics of the scheduler (served on the service's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from ._domain import IMPLAUSIBLE_REASONS

DECISIONS = Counter(
    "alnair_scheduler_decisions_total",
    "Scheduling outcomes: bound, pending (reason published), permanent-failure.",
    ["outcome"],
)
COMMIT_CONFLICTS = Counter(
    "alnair_scheduler_commit_conflicts_total",
    "Placements refused at commit because another writer filled the card first.",
)
EVENTS_REFUSED = Counter(
    "alnair_scheduler_workload_events_refused_total",
    "Workload events refused as implausible (wrong-node, wrong-source): they changed nothing.",
    ["reason"],
)
for _reason in IMPLAUSIBLE_REASONS:
    EVENTS_REFUSED.labels(_reason)  # each reason exported from the start, at 0
PENDING = Gauge("alnair_scheduler_pending_workloads", "Workloads waiting for a card.")
CYCLE_SECONDS = Histogram(
    "alnair_scheduler_cycle_seconds", "Duration of one scheduling cycle.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
