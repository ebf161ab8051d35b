"""The open dataset's schema: a column that disappears or changes unit fails here, in the
code's schema, in the committed data's schema.json, in its Parquet field metadata and in
its summary header."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from alnair_opendata import DATA_ROOT, SERIES, SUMMARY, SUMMARY_NAMES, dataset_dir, feature_columns

PUBLISHED = sorted(p.name for p in DATA_ROOT.iterdir() if (p / "summary.csv").is_file())

# The columns a user of the data relies on, with their units: pinned.
PINNED_SERIES = {
    "t_s": "s", "gpu_util_ratio": "ratio", "gpu_memory_bytes": "bytes", "cuda_memory_used_bytes": "bytes",
    "cuda_memory_limit_bytes": "bytes", "cuda_compute_limit_ratio": "ratio", "cuda_available_tokens": "count",
    "cuda_sm_utilization_ratio": "ratio", "cuda_launch_period_seconds": "s", "kernel_launches_total": "count",
    "throttled_seconds_total": "s", "memcpy_htod_bytes_total": "bytes", "memcpy_dtoh_bytes_total": "bytes",
    "memcpy_dtod_bytes_total": "bytes", "device_util_ratio": "ratio", "power_watts": "W",
    "temperature_celsius": "degC", "sm_clock_hertz": "Hz", "pcie_tx_bytes_per_second": "bytes/s",
    "pcie_rx_bytes_per_second": "bytes/s", "cpu_seconds_total": "s", "rss_bytes": "bytes",
    "io_read_bytes_total": "bytes", "io_write_bytes_total": "bytes", "iterations_total": "count",
}
PINNED_SUMMARY = {
    "run_id": "-", "workload": "-", "precision": "-", "batch": "count", "workers": "count",
    "compute_percent": "percent", "memory_gib": "GiB", "mode": "-", "co_runner": "-",
    "co_runner_compute_percent": "percent",
    "throughput_per_second": "1/s", "iteration_period_s": "s", "memory_peak_bytes": "bytes",
    "kernel_launches": "count", "throttled_s": "s", "memcpy_htod_bytes": "bytes", "memcpy_dtoh_bytes": "bytes",
    "cpu_seconds": "s", "rss_peak_bytes": "bytes", "energy_joules": "J", "profile_is_training": "-",
    "profile_predicted_peak_bytes": "bytes", "gpu_util_ratio_max": "ratio", "gpu_util_ratio_p50": "ratio",
    "kernel_launch_rate_mean": "1/s", "throttled_ratio_mean": "ratio", "memcpy_htod_bytes_per_second_p90": "bytes/s",
    "cpu_cores_mean": "cores", "power_watts_max": "W", "sm_clock_hertz_p10": "Hz", "temperature_celsius_max": "degC",
    "pcie_rx_bytes_per_second_mean": "bytes/s", "cuda_launch_period_seconds_p50": "s",
    "iterations_per_second_p50": "1/s",
}


def test_the_code_schema_keeps_every_pinned_column_and_unit() -> None:
    series = {c.name: c.unit for c in SERIES}
    summary = {c.name: c.unit for c in SUMMARY}
    assert {k: series.get(k) for k in PINNED_SERIES} == PINNED_SERIES
    assert {k: summary.get(k) for k in PINNED_SUMMARY} == PINNED_SUMMARY
    assert len(feature_columns()) >= 60 and len(SUMMARY_NAMES) == len(set(SUMMARY_NAMES))


def test_the_dry_run_is_published_for_the_tests() -> None:
    assert "sim" in PUBLISHED


@pytest.mark.parametrize("dataset", PUBLISHED)
def test_committed_data_carries_the_code_schema(dataset: str) -> None:
    where = dataset_dir(dataset)
    doc = json.loads((where / "schema.json").read_text())
    assert [(c["name"], c["unit"], c["dtype"]) for c in doc["series"]] == [(c.name, c.unit, c.dtype) for c in SERIES]
    assert [(c["name"], c["unit"], c["dtype"]) for c in doc["summary"]] == \
        [(c.name, c.unit, c.dtype) for c in SUMMARY]
    fields = pq.read_schema(where / "series.parquet")
    units = {f.name: (f.metadata or {}).get(b"unit", b"").decode() for f in fields}
    assert units == {"run_id": "-", **{c.name: c.unit for c in SERIES}}
    header = (where / "summary.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == SUMMARY_NAMES
