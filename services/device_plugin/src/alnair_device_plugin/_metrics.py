"""Prometheus metrics of the device plugin (bounded labels: resource, method, outcome, reason)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from alnair_common.allocations import REASONS

REQUESTS = Counter(
    "alnair_device_plugin_requests_total",
    "Kubelet calls by resource, method and outcome (ok, invalid-argument, failed-precondition, internal).",
    ["resource", "method", "outcome"],
)
REGISTRATIONS = Counter(
    "alnair_device_plugin_registrations_total", "Successful registrations of a resource with the kubelet.",
    ["resource"],
)
UNHEALTHY_GPUS = Gauge("alnair_device_plugin_unhealthy_gpus", "GPUs of this node currently advertised unhealthy.")
BINDS_REFUSED = Counter(
    "alnair_device_plugin_bind_decisions_refused_total",
    "Assignments (bind decisions, pod assignments) not kept because gpu_allocations does not hold "
    "their share as assigned (not-committed, wrong-node, wrong-share, over-capacity).",
    ["reason"],
)
for _reason in REASONS:
    BINDS_REFUSED.labels(_reason)  # each reason exported from the start, at 0
