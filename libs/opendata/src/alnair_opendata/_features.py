"""A run's summary features from its per-second series (plain Python, no numpy).

The recorder computes each summary row with this module as soon as a run ends, and the tests
recompute it from the published series: one definition of every feature. A series is a list
of rows (``{column: value or None}``) ordered by ``t_s``; a value that was not exported is
None and is left out of that column's statistics (all None gives None, not 0).

Counters (``*_total``) are turned into rates over each sample interval first; a counter that
went backwards (a restarted exporter) contributes no rate for that interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from ._schema import NO_STATS, RATES, SCALARS, SERIES, STATS

Row = Mapping[str, float | None]
BUSY_RATIO = 0.03  # the profiler's threshold for "busy"


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, 'linear')."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def statistics_of(values: Sequence[float | None]) -> dict[str, float | None]:
    """max, mean, p10..p90 of the present values."""
    got = sorted(_present(values))
    if not got:
        return dict.fromkeys(STATS)
    out: dict[str, float | None] = {"max": got[-1], "mean": statistics.fmean(got)}
    for d in range(1, 10):
        out[f"p{d}0"] = quantile(got, d / 10)
    return out


def rate(times: Sequence[float], counter: Sequence[float | None]) -> list[float | None]:
    """Per-interval derivative; the first sample (no interval before it) has none."""
    out: list[float | None] = [None]
    for i in range(1, len(times)):
        a, b, dt = counter[i - 1], counter[i], times[i] - times[i - 1]
        out.append(None if a is None or b is None or dt <= 0 or b < a else (b - a) / dt)
    return out


def column(rows: Sequence[Row], name: str) -> list[float | None]:
    return [r.get(name) for r in rows]


def _span(values: Sequence[float | None]) -> float | None:
    """Growth of a counter over the run: last present minus first present value."""
    got = _present(values)
    return got[-1] - got[0] if got else None


def _max(*columns: Sequence[float | None]) -> float | None:
    got = [v for c in columns for v in _present(c)]
    return max(got) if got else None


def _integral(times: Sequence[float], values: Sequence[float | None]) -> float | None:
    """Trapezoid rule over intervals whose both ends are present."""
    total, seen = 0.0, False
    for i in range(1, len(times)):
        a, b = values[i - 1], values[i]
        if a is not None and b is not None:
            total += (a + b) / 2 * (times[i] - times[i - 1])
            seen = True
    return total if seen else None


def _throughput(times: Sequence[float], iterations: Sequence[float | None]) -> float | None:
    """Iterations per second between the first and the last sample where the count grew."""
    grew = [i for i in range(1, len(times)) if iterations[i] is not None and iterations[i - 1] is not None
            and iterations[i] > iterations[i - 1]]  # type: ignore[operator]
    if len(grew) < 2:
        return None
    first, last = grew[0], grew[-1]
    dt = times[last] - times[first]
    done = iterations[last] - iterations[first]  # type: ignore[operator]
    return done / dt if dt > 0 and done > 0 else None


def features(rows: Sequence[Row]) -> dict[str, float | None]:
    """Every feature of ``_schema.feature_columns()``, in that order."""
    times = [float(r["t_s"]) for r in rows]  # type: ignore[arg-type]
    out: dict[str, float | None] = {}
    util = column(rows, "gpu_util_ratio")
    throughput = _throughput(times, column(rows, "iterations_total"))
    duration = times[-1] - times[0] if times else None
    throttled = _span(column(rows, "throttled_seconds_total"))
    present_util = _present(util)
    scalars: dict[str, float | None] = {
        "samples": float(len(rows)),
        "duration_s": duration,
        "throughput_per_second": throughput,
        "iteration_period_s": 1 / throughput if throughput else None,
        "memory_peak_bytes": _max(column(rows, "cuda_memory_used_bytes"), column(rows, "gpu_memory_bytes")),
        "kernel_launches": _span(column(rows, "kernel_launches_total")),
        "throttled_s": throttled,
        "throttled_share": throttled / duration if throttled is not None and duration else None,
        "memcpy_htod_bytes": _span(column(rows, "memcpy_htod_bytes_total")),
        "memcpy_dtoh_bytes": _span(column(rows, "memcpy_dtoh_bytes_total")),
        "memcpy_dtod_bytes": _span(column(rows, "memcpy_dtod_bytes_total")),
        "cpu_seconds": _span(column(rows, "cpu_seconds_total")),
        "rss_peak_bytes": _max(column(rows, "rss_bytes")),
        "io_read_bytes": _span(column(rows, "io_read_bytes_total")),
        "io_write_bytes": _span(column(rows, "io_write_bytes_total")),
        "network_receive_bytes": _span(column(rows, "pod_network_receive_bytes_total")),
        "network_transmit_bytes": _span(column(rows, "pod_network_transmit_bytes_total")),
        "energy_joules": _integral(times, column(rows, "power_watts")),
        "busy_share": (sum(v >= BUSY_RATIO for v in present_util) / len(present_util)) if present_util else None,
    }
    assert list(scalars) == [c.name for c in SCALARS]
    out.update(scalars)
    for c in SERIES:
        if c.name in NO_STATS:
            continue
        values = column(rows, c.name)
        name = c.name
        if c.name in RATES:
            name = RATES[c.name][0]
            values = rate(times, values)
        for stat, value in statistics_of(values).items():
            out[f"{name}_{stat}"] = value
    return out
