"""The per-run features of the open dataset (alnair_opendata.features), from series shaped
like a real GPU node's: the exporter's exposition text read by the recorder's own scrape
reader (scripts/gpu/opendata_series.py), then the statistics, rates and totals."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from alnair_opendata import SERIES_NAMES, feature_columns, features, quantile, rate, statistics_of

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts" / "gpu"))
from opendata_series import read_scrape, tree_usage  # noqa: E402

GIB = 2**30
LABELS = 'gpu_uuid="GPU-1",namespace="local",node="h200",pod_name="{}"'
DEVICE = 'gpu="0",gpu_uuid="GPU-1",model_name="NVIDIA H200",node="h200"'


def exposition(t: int) -> str:
    lab = LABELS.format("r001-cnn-c50")
    other = LABELS.format("r002-lm-c50s")
    return "\n".join([
        "# TYPE alnair_gpu_util gauge",
        f"alnair_gpu_util{{{lab}}} {40 + 10 * (t % 2)}",
        f"alnair_gpu_util{{{other}}} 5",
        f"alnair_pod_gpu_memory_used_bytes{{{lab}}} {2 * GIB + t * 2**20}",
        f"alnair_cuda_memory_used_bytes{{{lab}}} {2 * GIB}",
        f"alnair_cuda_memory_limit_bytes{{{lab}}} {24 * GIB}",
        f"alnair_cuda_compute_limit_ratio{{{lab}}} 0.5",
        f"alnair_cuda_available_tokens{{{lab}}} {100 - t}",
        f"alnair_cuda_kernel_launches_total{{{lab}}} {5000 * t}",
        f"alnair_cuda_throttled_seconds_total{{{lab}}} {0.25 * t}",
        f'alnair_cuda_memcpy_bytes_total{{direction="htod",{lab}}} {1000 * t}',
        f'alnair_cuda_memcpy_bytes_total{{direction="dtoh",{lab}}} {10 * t}',
        f"alnair_cuda_launch_period_seconds{{{lab}}} 0.012",
        f"alnair_gpu_utilization_ratio{{{DEVICE}}} 0.55",
        f"alnair_gpu_power_watts{{{DEVICE}}} {200 + t}",
        f"alnair_gpu_sm_clock_hertz{{{DEVICE}}} 1.98e9",
        "alnair_exporter_samples_total 3",
    ]) + "\n"


def series(n: int = 11) -> list[dict[str, float | None]]:
    rows = []
    for t in range(n):
        pods, device = read_scrape(exposition(t))
        rows.append({"t_s": float(t), **device, **pods["r001-cnn-c50"], "iterations_total": 20.0 * t,
                     "cpu_seconds_total": 1.5 * t})
    return rows


def test_scrape_reads_per_workload_series_by_name_units_and_copy_directions() -> None:
    pods, device = read_scrape(exposition(3))
    cnn = pods["r001-cnn-c50"]
    assert cnn["gpu_util_ratio"] == pytest.approx(0.5)  # percent in the exposition, a ratio here
    assert cnn["memcpy_htod_bytes_total"] == 3000 and cnn["memcpy_dtoh_bytes_total"] == 30
    assert "memcpy_dtod_bytes_total" not in cnn  # not exported: stays absent, not 0
    assert pods["r002-lm-c50s"] == {"gpu_util_ratio": 0.05}
    assert device == {"device_util_ratio": 0.55, "power_watts": 203.0, "sm_clock_hertz": 1.98e9}
    assert set(cnn) | set(device) <= set(SERIES_NAMES)


def test_features_cover_every_column_and_compute_statistics_rates_and_totals() -> None:
    f = features(series())
    assert list(f) == [c.name for c in feature_columns()] and len(f) >= 60
    assert f["gpu_util_ratio_max"] == pytest.approx(0.5)
    assert f["gpu_util_ratio_p50"] == pytest.approx(0.4)  # 6 samples at 0.4, 5 at 0.5
    assert f["kernel_launch_rate_mean"] == pytest.approx(5000)
    assert f["throttled_ratio_p90"] == pytest.approx(0.25)
    assert f["throttled_s"] == pytest.approx(2.5) and f["throttled_share"] == pytest.approx(0.25)
    assert f["memcpy_htod_bytes"] == 10_000 and f["memcpy_htod_bytes_per_second_mean"] == pytest.approx(1000)
    assert f["memcpy_dtod_bytes"] is None and f["memcpy_dtod_bytes_per_second_max"] is None
    assert f["throughput_per_second"] == pytest.approx(20) and f["iteration_period_s"] == pytest.approx(0.05)
    assert f["cpu_cores_mean"] == pytest.approx(1.5)
    assert f["memory_peak_bytes"] == 2 * GIB + 10 * 2**20
    assert f["energy_joules"] == pytest.approx(sum((200 + t + 200 + t + 1) / 2 for t in range(10)))
    assert f["busy_share"] == 1.0 and f["samples"] == 11 and f["duration_s"] == 10
    assert f["cuda_available_tokens_p10"] == pytest.approx(91)
    assert "cuda_compute_limit_ratio_max" not in f  # a limit is a label, not a measurement


def test_quantiles_match_linear_interpolation_and_missing_values_are_left_out() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    s = statistics_of([None, 10.0, float("nan"), 0.0, 5.0])
    assert s["max"] == 10 and s["mean"] == 5 and s["p50"] == 5 and s["p10"] == pytest.approx(1.0)
    assert all(v is None for v in statistics_of([None, None]).values())


def test_a_counter_that_goes_back_gives_no_rate_for_that_interval() -> None:
    assert rate([0.0, 1.0, 2.0, 2.0, 4.0], [0.0, 10.0, 4.0, 6.0, 10.0]) == [None, 10.0, None, None, 2.0]


def test_process_tree_usage_of_this_process() -> None:
    here = tree_usage(__import__("os").getpid())
    assert here is not None and here["processes"] >= 1 and here["rss_bytes"] > 10 * 2**20
    assert here["cpu_seconds_total"] > 0 and here["threads"] >= 1 and not math.isnan(here["io_read_bytes_total"])
    assert tree_usage(2**22 + 7) is None  # past pid_max: gone


def test_the_recorder_imports_where_pyarrow_is_not_installed() -> None:
    """The GPU machine has no pyarrow: the recorder, the schema and the features must not need it."""
    import subprocess

    code = ("import sys; sys.modules['pyarrow'] = None; sys.path.insert(0, 'scripts/gpu'); "
            "import opendata_record; from alnair_opendata import features, SUMMARY; print(len(SUMMARY))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) >= 60
