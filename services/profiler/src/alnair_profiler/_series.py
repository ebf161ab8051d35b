"""Maxima and deciles of one measured series.

Why keep the values and not a streaming sketch: a profile is written once per workload and
must be identical however often the events are replayed, so the summary is a pure function
of the stored values. Memory stays bounded by thinning: past ``MAX_POINTS`` every second
point is dropped (deterministic, so a replay thins the same way), while the maximum is kept
exactly on the side because the maximum is what the scheduler and the annotations use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_POINTS = 20_000
DECILES = tuple(range(10, 101, 10))


@dataclass(frozen=True)
class SeriesSummary:
    """Maximum and 10-point distribution (10th..100th percentile, nearest rank) of a series."""

    max: float = 0.0
    deciles: tuple[float, ...] = ()
    samples: int = 0

    @classmethod
    def of(cls, values: list[float], *, samples: int | None = None,
           exact_max: float | None = None) -> SeriesSummary:
        if not values:
            return cls(max=exact_max or 0.0, samples=samples or 0)
        ordered = sorted(values)
        n = len(ordered)
        deciles = tuple(ordered[max(0, math.ceil(p / 100 * n) - 1)] for p in DECILES)
        top = max(ordered[-1], exact_max if exact_max is not None else ordered[-1])
        return cls(max=top, deciles=deciles, samples=samples if samples is not None else n)

    def to_doc(self) -> dict[str, object]:
        return {"max": self.max, "deciles": list(self.deciles), "samples": self.samples}

    @classmethod
    def from_doc(cls, doc: dict[str, object] | None) -> SeriesSummary:
        if not doc:
            return cls()
        return cls(max=float(doc.get("max", 0.0)),  # type: ignore[arg-type]
                   deciles=tuple(float(v) for v in doc.get("deciles", ())),  # type: ignore[union-attr]
                   samples=int(doc.get("samples", 0)))  # type: ignore[call-overload]

    def merged_max(self, other_max: float | None) -> SeriesSummary:
        """This summary with its maximum raised to ``other_max`` (e.g. a PromQL maximum)."""
        if other_max is None or other_max <= self.max:
            return self
        return SeriesSummary(max=other_max, deciles=self.deciles, samples=self.samples)


@dataclass
class Series:
    """Timestamped values of one metric of one workload, thinned past ``MAX_POINTS``."""

    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    count: int = 0
    peak: float | None = None

    def add(self, t: float, value: float) -> None:
        self.times.append(t)
        self.values.append(value)
        self.count += 1
        self.peak = value if self.peak is None else max(self.peak, value)
        if len(self.values) > MAX_POINTS:
            self.times = self.times[::2]
            self.values = self.values[::2]

    def summary(self) -> SeriesSummary:
        return SeriesSummary.of(self.values, samples=self.count, exact_max=self.peak)

    def ordered(self) -> tuple[list[float], list[float]]:
        """Times and values sorted by time (samples from several sources may interleave)."""
        pairs = sorted(zip(self.times, self.values, strict=True))
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def to_doc(self) -> dict[str, object]:
        return {"t": self.times, "v": self.values, "n": self.count, "peak": self.peak}

    @classmethod
    def from_doc(cls, doc: dict[str, object]) -> Series:
        peak = doc.get("peak")
        return cls(times=[float(x) for x in doc.get("t", [])],  # type: ignore[union-attr]
                   values=[float(x) for x in doc.get("v", [])],  # type: ignore[union-attr]
                   count=int(doc.get("n", 0)),  # type: ignore[call-overload]
                   peak=None if peak is None else float(peak))  # type: ignore[arg-type]
