"""Alnair's Grafana dashboards as code: this file is the source, the JSON beside it is output.

Run ``python k8s/base/grafana/dashboards.py`` after editing; a test fails when the
committed JSON differs from what this file generates, and another when a query names a
metric that no Alnair component exports. Hand edits of the JSON are therefore lost by
design: one source, reviewed as code.

Queries use only the metric names of the exporter (GPU, per-pod GPU, CUDA-level, host),
the scheduler, the profiler, the cache hydrator and the bus client, with their exposition names (counters end
in ``_total``). The Prometheus data source is provisioned with the fixed uid below, so the
dashboards need no import-time choice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATASOURCE = {"type": "prometheus", "uid": "alnair-prometheus"}
HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "dashboards"

POD = 'namespace=~"$namespace", pod_name=~"$pod"'
NODE = 'node=~"$node"'


def target(expr: str, legend: str, ref: str = "A") -> dict:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def panel(title: str, description: str, targets: list[dict], *, unit: str, x: int, y: int,
          w: int = 12, h: int = 8, kind: str = "timeseries", max_value: float | None = None) -> dict:
    defaults: dict = {"unit": unit}
    if max_value is not None:
        defaults |= {"min": 0, "max": max_value}
    return {
        "type": kind, "title": title, "description": description, "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}}
        if kind == "timeseries" else {},
        "targets": [{**t, "refId": chr(ord("A") + i)} for i, t in enumerate(targets)],
    }


def variable(name: str, query: str, label: str) -> dict:
    return {
        "name": name, "label": label, "type": "query", "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"var-{name}"}, "definition": query,
        "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1,
    }


def dashboard(uid: str, title: str, description: str, panels: list[dict], variables: list[dict]) -> dict:
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "uid": uid, "title": title, "description": description, "tags": ["alnair"],
        "editable": False, "schemaVersion": 39, "version": 1, "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"}, "timezone": "utc",
        "templating": {"list": variables}, "panels": panels,
    }


NODE_VAR = variable("node", "label_values(alnair_gpu_memory_total_bytes, node)", "Node")
NAMESPACE_VAR = variable("namespace", "label_values(alnair_pod_gpu_memory_used_bytes, namespace)", "Namespace")
POD_VAR = variable("pod", 'label_values(alnair_pod_gpu_memory_used_bytes{namespace=~"$namespace"}, pod_name)',
                   "Pod")


def gpu_sharing() -> dict:
    """Cluster view: what the scheduler handed out on each card against what the card does."""
    card = "node, gpu_uuid"
    return dashboard("alnair-gpu-sharing", "Alnair / GPU sharing",
                     "Allocation (the limits the interceptor enforces) against measured usage, per card.", [
        panel("Memory allocated vs used per card",
              "Allocated: alnair/vgpu-memory the kubelet gave the card's pods. Enforced: the interceptor's "
              "limits in their CUDA regions. Used: NVML's device memory in use.",
              [target(f"sum by ({card}) (alnair_pod_gpu_allocated_memory_bytes{{{NODE}}})",
                      "allocated {{node}} {{gpu_uuid}}"),
               target(f"sum by ({card}) (alnair_cuda_memory_limit_bytes{{{NODE}}})", "enforced {{node}} {{gpu_uuid}}"),
               target(f"sum by ({card}) (alnair_gpu_memory_used_bytes{{{NODE}}})", "used {{node}} {{gpu_uuid}}"),
               target(f"sum by ({card}) (alnair_gpu_memory_total_bytes{{{NODE}}})", "capacity {{node}} {{gpu_uuid}}")],
              unit="bytes", x=0, y=0),
        panel("Compute allocated vs used per card",
              "Allocated: alnair/vgpu-compute the kubelet gave the card's pods (share of one GPU). Enforced: the "
              "interceptor's compute limits. Used: NVML kernel-time share.",
              [target(f"sum by ({card}) (alnair_pod_gpu_allocated_compute_ratio{{{NODE}}})",
                      "allocated {{node}} {{gpu_uuid}}"),
               target(f"sum by ({card}) (alnair_cuda_compute_limit_ratio{{{NODE}}})",
                      "enforced {{node}} {{gpu_uuid}}"),
               target(f"avg by ({card}) (alnair_gpu_utilization_ratio{{{NODE}}})", "used {{node}} {{gpu_uuid}}")],
              unit="percentunit", x=12, y=0),
        panel("Pods sharing each card", "Pods with live processes on the card.",
              [target(f"count by ({card}) (alnair_pod_gpu_processes{{{NODE}}} > 0)", "{{node}} {{gpu_uuid}}")],
              unit="short", x=0, y=8),
        panel("Memory bandwidth utilisation", "Share of the period the memory controller was busy.",
              [target(f"alnair_gpu_memory_bandwidth_utilization_ratio{{{NODE}}}", "{{node}} gpu{{gpu}}")],
              unit="percentunit", x=12, y=8, max_value=1),
        panel("Power", "Board power draw.", [target(f"alnair_gpu_power_watts{{{NODE}}}", "{{node}} gpu{{gpu}}")],
              unit="watt", x=0, y=16),
        panel("Temperature and uncorrected ECC errors", "Thermal headroom and memory faults per card.",
              [target(f"alnair_gpu_temperature_celsius{{{NODE}}}", "{{node}} gpu{{gpu}} °C"),
               target(f"increase(alnair_gpu_ecc_uncorrected_errors_total{{{NODE}}}[1h])", "{{node}} gpu{{gpu}} ECC/h")],
              unit="short", x=12, y=16),
        panel("Exporter errors", "Failed sampling periods and kubelet PodResources calls per second, by node.",
              [target("sum by (node) (rate(alnair_exporter_sample_errors_total[5m]))", "sampling {{node}}"),
               target("sum by (node) (rate(alnair_exporter_pod_resources_errors_total[5m]))",
                      "PodResources {{node}}")],
              unit="ops", x=0, y=24),
        panel("Replayed data", "1 where the exporter replays a recording instead of measuring (demo, CI).",
              [target("max by (node) (alnair_exporter_simulated)", "{{node}}")], unit="short", x=12, y=24,
              kind="stat"),
    ], [NODE_VAR])


def workloads() -> dict:
    """Per pod: GPU use against its limits, CUDA-level activity, and the host side."""
    pod_gpu = "namespace, pod_name, gpu_uuid"
    return dashboard("alnair-workloads", "Alnair / Workloads",
                     "Per-pod GPU utilisation and memory against limits, CUDA-level activity, host resources.", [
        panel("GPU utilisation per pod", "SM utilisation of the pod's processes on each GPU (NVML per-process).",
              [target(f"alnair_gpu_util{{{POD}}}", "{{namespace}}/{{pod_name}} {{gpu_uuid}}"),
               target(f"100 * alnair_cuda_compute_limit_ratio{{{POD}}}", "limit {{namespace}}/{{pod_name}}")],
              unit="percent", x=0, y=0),
        panel("GPU memory per pod vs limit", "Device memory held (CUDA allocations) against the enforced limit.",
              [target(f"sum by ({pod_gpu}) (alnair_cuda_memory_used_bytes{{{POD}}})",
                      "used {{namespace}}/{{pod_name}}"),
               target(f"sum by ({pod_gpu}) (alnair_cuda_memory_limit_bytes{{{POD}}})",
                      "limit {{namespace}}/{{pod_name}}"),
               target(f"sum by ({pod_gpu}) (alnair_pod_gpu_memory_used_bytes{{{POD}}})",
                      "NVML {{namespace}}/{{pod_name}}"),
               target(f"sum by ({pod_gpu}) (alnair_pod_gpu_allocated_memory_bytes{{{POD}}})",
                      "allocated {{namespace}}/{{pod_name}}")],
              unit="bytes", x=12, y=0),
        panel("Kernel launches", "Kernel and graph launches per second.",
              [target(f"sum by ({pod_gpu}) (rate(alnair_cuda_kernel_launches_total{{{POD}}}[1m]))",
                      "{{namespace}}/{{pod_name}}")],
              unit="ops", x=0, y=8),
        panel("Throttled time", "Share of wall time launches waited for compute tokens (the limit at work).",
              [target(f"sum by ({pod_gpu}) (rate(alnair_cuda_throttled_seconds_total{{{POD}}}[1m]))",
                      "{{namespace}}/{{pod_name}}")],
              unit="percentunit", x=12, y=8),
        panel("Host↔device copies", "Copy throughput by direction.",
              [target(f"sum by (namespace, pod_name, direction) (rate(alnair_cuda_memcpy_bytes_total{{{POD}}}[1m]))",
                      "{{namespace}}/{{pod_name}} {{direction}}")],
              unit="Bps", x=0, y=16),
        panel("Compute tokens left", "Launch tokens in the pod's bucket; near zero means the pod is held back.",
              [target(f"alnair_cuda_available_tokens{{{POD}}}", "{{namespace}}/{{pod_name}}")],
              unit="short", x=12, y=16),
        panel("CPU", "CPU cores used by the pod's cgroups.",
              [target(f"rate(alnair_pod_cpu_seconds_total{{{POD}}}[1m])", "{{namespace}}/{{pod_name}}")],
              unit="short", x=0, y=24),
        panel("Host memory", "Memory charged to the pod's cgroups.",
              [target(f"alnair_pod_memory_bytes{{{POD}}}", "{{namespace}}/{{pod_name}}")],
              unit="bytes", x=12, y=24),
    ], [NAMESPACE_VAR, POD_VAR])


def platform() -> dict:
    """The platform itself: scheduling decisions, profiles, the bus."""
    return dashboard("alnair-platform", "Alnair / Scheduler, profiler and bus",
                     "Scheduler decisions and backlog, profiler records, bus traffic and errors.", [
        panel("Scheduler decisions", "Outcomes per second: bound, pending (the reason is published on the bus), "
              "permanent failure.",
              [target("sum by (outcome) (rate(alnair_scheduler_decisions_total[5m]))", "{{outcome}}")],
              unit="ops", x=0, y=0),
        panel("Pending workloads", "Workloads waiting for a card (`alnair events` shows why).",
              [target("sum(alnair_scheduler_pending_workloads)", "pending")], unit="short", x=12, y=0),
        panel("Scheduling cycle p99", "99th percentile duration of one scheduling cycle.",
              [target("histogram_quantile(0.99, sum by (le) (rate(alnair_scheduler_cycle_seconds_bucket[5m])))",
                      "p99")],
              unit="s", x=0, y=8),
        panel("Commit conflicts", "Placements refused at commit because another writer filled the card first.",
              [target("sum(rate(alnair_scheduler_commit_conflicts_total[5m]))", "conflicts")], unit="ops", x=12, y=8),
        panel("Profiles recorded", "Workload profiles written to MongoDB, by outcome.",
              [target("sum by (outcome) (increase(alnair_profiler_profiles_total[1h]))", "{{outcome}}")],
              unit="short", x=0, y=16),
        panel("Profiles waiting for the store", "Profiles spooled while MongoDB does not answer.",
              [target("sum(alnair_profiler_profiles_waiting)", "waiting"),
               target("sum(rate(alnair_profiler_rejected_values_total[5m]))", "rejected values/s")],
              unit="short", x=12, y=16),
        panel("Bus messages", "Messages published per second, by service.",
              [target("sum by (service) (rate(alnair_bus_published_messages_total[1m]))", "{{service}}")],
              unit="ops", x=0, y=24),
        panel("Bus errors", "Undecodable payloads and failed handlers per second.",
              [target("sum by (service) (rate(alnair_bus_decode_errors_total[5m]))", "decode {{service}}"),
               target("sum by (service, outcome) (rate(alnair_bus_handler_errors_total[5m]))",
                      "handler {{service}} {{outcome}}")],
              unit="ops", x=12, y=24),
    ], [])


def dataset_cache() -> dict:
    """The dataset cache: how full the tier is, how often lookups hit, how far hydrations got."""
    return dashboard("alnair-dataset-cache", "Alnair / Dataset cache",
                     "The cache tier's size against its budget, its hit ratio, and each data set's "
                     "hydration progress (the cache hydrator's metrics).", [
        panel("Cache size", "Bytes the tier stores (each chunk once, however many data sets share it) "
              "against the budget the hydrator keeps it under.",
              [target("max(alnair_cache_tier_stored_bytes)", "stored"),
               target("max(alnair_cache_tier_budget_bytes)", "budget")],
              unit="bytes", x=0, y=0),
        panel("Hit ratio", "Lookups of the tier that found their key, over all lookups, summed over the tier's "
              "Redis servers: data clients reading manifests and chunks, and the hydrator checking what is "
              "stored. Low while data sets hydrate; near 1 on warm epochs.",
              [target("sum(rate(alnair_cache_tier_hits_total[5m])) / (sum(rate(alnair_cache_tier_hits_total[5m]))"
                      " + sum(rate(alnair_cache_tier_misses_total[5m])))", "hit ratio")],
              unit="percentunit", x=12, y=0, max_value=1),
        panel("Hydration progress", "Cached bytes over total bytes of each data set (1 once READY; 0 after an "
              "eviction).",
              [target('max by (namespace, dataset) (alnair_cache_dataset_progress_ratio{namespace=~"$namespace"})',
                      "{{namespace}}/{{dataset}}")],
              unit="percentunit", x=0, y=8, max_value=1),
        panel("Cached bytes per data set", "Bytes of each data set in the tier (shared chunks counted in each).",
              [target('max by (namespace, dataset) (alnair_cache_dataset_cached_bytes{namespace=~"$namespace"})',
                      "{{namespace}}/{{dataset}}")],
              unit="bytes", x=12, y=8),
        panel("Hydration throughput", "Bytes per second read from the sources, and bytes of new chunks stored "
              "(the difference is what dedup found already stored).",
              [target("sum(rate(alnair_cache_hydrator_source_read_bytes_total[5m]))", "read from sources"),
               target("sum(rate(alnair_cache_hydrator_stored_bytes_total[5m]))", "stored")],
              unit="Bps", x=0, y=16),
        panel("Hydrations and evictions", "Hydrations ended per hour by phase and reason, and data sets evicted.",
              [target("sum by (phase, reason) (increase(alnair_cache_hydrator_hydrations_total[1h]))",
                      "{{phase}} {{reason}}"),
               target("sum(increase(alnair_cache_hydrator_evictions_total[1h]))", "evicted")],
              unit="short", x=12, y=16),
    ], [variable("namespace", "label_values(alnair_cache_dataset_progress_ratio, namespace)", "Namespace")])


DASHBOARDS = {"alnair-gpu-sharing.json": gpu_sharing, "alnair-workloads.json": workloads,
              "alnair-platform.json": platform, "alnair-dataset-cache.json": dataset_cache}


def render() -> dict[str, str]:
    """File name -> JSON text, deterministic (sorted keys, trailing newline)."""
    return {name: json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main() -> int:
    OUT_DIR.mkdir(exist_ok=True)
    for name, text in render().items():
        (OUT_DIR / name).write_text(text)
        print(f"wrote {OUT_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
