"""Prometheus metrics of kube-bridge (served on the service's /metrics; bounded labels)."""

from __future__ import annotations

from prometheus_client import Counter

from alnair_common.allocations import REASONS

BINDS_REFUSED = Counter(
    "alnair_kube_bridge_bind_decisions_refused_total",
    "Bind decisions not carried out because gpu_allocations does not hold their share as "
    "decided (not-committed, wrong-node, wrong-share, over-capacity).",
    ["reason"],
)
for _reason in REASONS:
    BINDS_REFUSED.labels(_reason)  # each reason exported from the start, at 0
