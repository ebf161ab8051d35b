"""Measured load of each card, from the exporter's live samples (the utilisation-aware profile).

Allocations say what workloads *asked* for; samples say what the card is *doing*. A card
whose tenants asked for 30 % but burn 95 % has no real headroom. The profile therefore uses
the peak over a recent window (peaks, not means: a training job's utilisation swings with
every iteration, and placing a new tenant into the troughs starves both). Samples older
than the window are forgotten, so a card whose exporter went quiet falls back to its
allocations instead of being judged on stale numbers.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class CardSample:
    gpu_uuid: str
    at: float
    utilization_ratio: float
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True)
class MeasuredLoad:
    """Peak SM utilisation (0..1) and peak memory in use (GiB) over the window."""

    utilization_ratio: float
    memory_used_gib: float
    samples: int


class UtilisationTracker:
    def __init__(self, window_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window_seconds must be > 0, got {window_seconds}")
        self.window = window_seconds
        self.clock = clock
        self._samples: dict[str, deque[CardSample]] = {}

    def add(self, sample: CardSample) -> None:
        q = self._samples.setdefault(sample.gpu_uuid, deque())
        q.append(sample)
        self._trim(q)

    def _trim(self, q: deque[CardSample]) -> None:
        horizon = self.clock() - self.window
        while q and q[0].at < horizon:
            q.popleft()

    def load(self, gpu_uuid: str) -> MeasuredLoad | None:
        """The card's peak load in the window, or None when no fresh sample exists."""
        q = self._samples.get(gpu_uuid)
        if not q:
            return None
        self._trim(q)
        if not q:
            return None
        return MeasuredLoad(
            utilization_ratio=max(s.utilization_ratio for s in q),
            memory_used_gib=max(s.memory_used_bytes for s in q) / GIB,
            samples=len(q),
        )
