"""Prometheus metrics of the device plugin (bounded labels: resource, method, outcome)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

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
