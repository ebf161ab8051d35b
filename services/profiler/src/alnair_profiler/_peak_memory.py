"""Predict a workload's peak GPU memory from the first part of its run.

Why this rule: a PyTorch training job allocates almost all of its memory during its first
iterations (weights, optimizer state, activations of one batch, cuDNN autotuning scratch),
then the caching allocator holds it flat. On the H200 recordings the peak is reached within
the first seconds of sustained GPU work. So the prediction is made once the workload has been
busy on the GPU for ``BUSY_SECONDS`` (cumulative), as the maximum seen up to then plus the
growth still under way (the last second's rise, once more). A workload that never becomes
busy (idle notebook, sparse inference) holds what it allocated at start: its prediction is
what it held when a quarter of its run had passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BUSY_RATIO = 0.03
BUSY_SECONDS = 2.0
IDLE_FRACTION = 0.25


@dataclass(frozen=True)
class PeakPrediction:
    predicted_bytes: int
    # When the prediction was made, seconds since the first sample, and the share of the run.
    at_seconds: float
    run_fraction: float


def predict_peak(mem_times: Sequence[float], mem_values: Sequence[float],
                 util_times: Sequence[float], util_values: Sequence[float]) -> PeakPrediction | None:
    """None when there is no memory series at all."""
    if not mem_values:
        return None
    t0, t1 = mem_times[0], mem_times[-1]
    cut = _busy_cut(util_times, util_values)
    if cut is None:
        cut = t0 + IDLE_FRACTION * (t1 - t0)
    seen = [(t, v) for t, v in zip(mem_times, mem_values, strict=True) if t <= cut]
    if not seen:
        seen = [(mem_times[0], mem_values[0])]
    top = max(v for _, v in seen)
    recent = [v for t, v in seen if t >= cut - 1.0]
    rise = max(0.0, recent[-1] - min(recent)) if recent else 0.0
    span = t1 - t0
    return PeakPrediction(int(top + rise), cut - t0, (cut - t0) / span if span > 0 else 1.0)


def _busy_cut(times: Sequence[float], values: Sequence[float]) -> float | None:
    """The time at which the workload has been busy for BUSY_SECONDS in total."""
    busy = 0.0
    for i in range(1, len(values)):
        if values[i] >= BUSY_RATIO:
            busy += min(times[i] - times[i - 1], 1.0)
            if busy >= BUSY_SECONDS:
                return times[i]
    return None
