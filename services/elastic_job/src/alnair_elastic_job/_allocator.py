"""The GPU allocator: how many workers each elastic job may have, given the free GPUs.

Why this shape:

* **Objective.** Cluster goodput is the sum over jobs of their speedup ``x(n) / x(1)``
  (samples/s at ``n`` workers over samples/s at one), so jobs with different models compare
  in one unit. Workers are handed out one at a time to the job with the largest marginal
  speedup per GPU; for concave scaling curves (diminishing returns, what data-parallel jobs
  measure) that greedy is the optimum of the separable problem, and it is deterministic.
* **Never below min.** Running jobs keep ``min`` first (oldest first), then waiting jobs are
  admitted at ``min`` in arrival order, backfilling past one that does not fit; only then is
  anything grown. A job whose ``min`` no longer fits the cards gets 0 (it must wait).
* **Hysteresis.** Each rescale stops and re-rendezvous the job's workers (torchrun restarts
  the group), so a change must pay: a running job changed less than
  ``min_interval_seconds`` ago keeps its size, and the running jobs are resized at all
  only if that raises cluster goodput by ``min_gain`` (relative) over keeping their sizes.
* **Capacity is cards, not a number.** A fractional worker needs its memory and compute on
  one card, a whole-GPU worker ``k`` untouched cards of one node; every grant is checked by
  packing it, so the sum of grants always fits. The cards passed in are what elastic jobs
  may use: capacity minus the shares of other workloads (the jobs' own workers count as free).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ._job_spec import WorkerRequest


@dataclass(frozen=True)
class FreeCard:
    node: str
    uuid: str
    memory_gib: int
    compute_percent: int = 100


@dataclass(frozen=True)
class ScalingCurve:
    """Throughput (samples/s) per world size: measured points, else linear with efficiency.

    Between measured points the curve is interpolated (from (0, 0)); past the last one each
    added worker brings ``efficiency`` times the per-worker rate measured there.
    """

    measured: tuple[tuple[int, float], ...] = ()
    efficiency: float = 0.9

    @classmethod
    def of(cls, measured: Mapping[int, float], efficiency: float = 0.9) -> ScalingCurve:
        return cls(tuple(sorted((int(n), float(x)) for n, x in measured.items() if n > 0 and x > 0)),
                   efficiency)

    def rate(self, n: int) -> float:
        if n <= 0:
            return 0.0
        if not self.measured:
            return 1.0 + self.efficiency * (n - 1)
        lo_n, lo_x = 0, 0.0
        for m, x in self.measured:
            if n == m:
                return x
            if n < m:
                return lo_x + (x - lo_x) * (n - lo_n) / (m - lo_n)
            lo_n, lo_x = m, x
        return lo_x + (n - lo_n) * self.efficiency * lo_x / lo_n

    def speedup(self, n: int) -> float:
        return self.rate(n) / self.rate(1)


@dataclass(frozen=True)
class ElasticDemand:
    """One job as the allocator sees it."""

    name: str
    min_replicas: int
    max_replicas: int
    request: WorkerRequest
    curve: ScalingCurve = field(default_factory=ScalingCurve)
    current: int = 0                   # workers it has now (0: waiting)
    changed_at: float = -math.inf      # when its size last changed
    arrival: float = 0.0


@dataclass(frozen=True)
class Hysteresis:
    min_gain: float = 0.1
    min_interval_seconds: float = 300.0


DEFAULT_HYSTERESIS = Hysteresis()


class _Packing:
    """Free cards, consumed worker by worker: a whole-GPU worker on the node with the fewest
    untouched cards that still has enough, a share on the fullest card it still fits."""

    def __init__(self, cards: Iterable[FreeCard]) -> None:
        self.cards = sorted(cards, key=lambda c: (c.node, c.uuid))
        self.free = {c.uuid: [c.memory_gib, c.compute_percent] for c in self.cards}

    def _untouched(self, c: FreeCard) -> bool:
        return c.compute_percent >= 100 and self.free[c.uuid] == [c.memory_gib, c.compute_percent]

    def take(self, req: WorkerRequest) -> bool:
        if req.whole_gpus:
            by_node: dict[str, list[FreeCard]] = {}
            for c in self.cards:
                if self._untouched(c):
                    by_node.setdefault(c.node, []).append(c)
            nodes = sorted((len(cs), n) for n, cs in by_node.items() if len(cs) >= req.whole_gpus)
            if not nodes:
                return False
            for c in by_node[nodes[0][1]][:req.whole_gpus]:
                self.free[c.uuid] = [0, 0]
            return True
        fits = [c for c in self.cards if self.free[c.uuid][0] >= req.memory_gib
                and self.free[c.uuid][1] >= req.compute_percent]
        if not fits:
            return False
        best = min(fits, key=lambda c: (self.free[c.uuid][1], self.free[c.uuid][0]))
        self.free[best.uuid][0] -= req.memory_gib
        self.free[best.uuid][1] -= req.compute_percent
        return True


def fits(cards: Iterable[FreeCard], workers: Iterable[WorkerRequest]) -> bool:
    """Whether these workers fit the cards together, packed largest first.

    Packing the whole multiset from scratch (not job by job) makes the answer independent
    of the order of the jobs, so a grant that was applied is granted again next round.
    """
    packing = _Packing(cards)
    order = sorted(workers, key=lambda r: (-r.whole_gpus, -r.compute_percent, -r.memory_gib))
    return all(packing.take(r) for r in order)


def never_fits(cluster: Sequence[FreeCard], request: WorkerRequest, workers: int) -> str:
    """Why ``workers`` such workers fit no packing of the cluster's cards even with nothing
    else running (``cluster``: every healthy card at its full size); "" when they fit."""
    if fits(cluster, [request] * workers):
        return ""
    if not cluster:
        return (f"the cluster reports no healthy GPU; minReplicas={workers} workers need one "
                "(check `alnair status` or the nodes' device plugins)")
    def n(count: int, what: str) -> str:
        return f"{count} {what}{'' if count == 1 else 's'}"

    asked = (f"{n(request.whole_gpus, 'whole GPU')} on one node" if request.whole_gpus
             else f"{request.memory_gib} GiB and {request.compute_percent} % of one card")
    per_node: dict[str, int] = {}
    for c in cluster:
        per_node[c.node] = per_node.get(c.node, 0) + 1
    biggest = max(cluster, key=lambda c: (c.memory_gib, c.compute_percent))
    have = (f"{n(len(cluster), 'card')} on {n(len(per_node), 'node')}, at most "
            f"{max(per_node.values())} on one node, the largest {biggest.memory_gib} GiB")
    who = f"minReplicas=1 worker of {asked} does" if workers == 1 else \
        f"minReplicas={workers} workers, each of {asked}, do"
    return (f"{who} not fit this cluster even when it is idle ({have}); lower spec.worker or "
            "spec.minReplicas, or add GPUs")


def _gain(d: ElasticDemand, n: int) -> float:
    """Marginal speedup per GPU of the ``n+1``-th worker."""
    return (d.curve.speedup(n + 1) - d.curve.speedup(n)) / d.request.gpus


def _plan(cards: list[FreeCard], jobs: list[ElasticDemand], fixed: Mapping[str, int]) -> dict[str, int]:
    grant, chosen = {d.name: 0 for d in jobs}, []

    def add(d: ElasticDemand, k: int) -> bool:
        if k > 0 and not fits(cards, [*chosen, *[d.request] * k]):
            return False
        chosen.extend([d.request] * k)
        grant[d.name] += k
        return True

    running = [d for d in jobs if d.current >= d.min_replicas]
    waiting = [d for d in jobs if d.current < d.min_replicas]
    for d in running + waiting:   # the mins: running jobs first, then admission in order
        add(d, d.min_replicas)
    for d in jobs:                # sizes held by hysteresis, as far as they fit
        while grant[d.name] and grant[d.name] < fixed.get(d.name, 0) and add(d, 1):
            pass
    growing = [d for d in jobs if grant[d.name] and d.name not in fixed]
    while growing:
        best = max(growing, key=lambda d: (_gain(d, grant[d.name]), -grant[d.name], -d.arrival,
                                           d.name))
        if grant[best.name] >= best.max_replicas or _gain(best, grant[best.name]) <= 0 \
                or not add(best, 1):
            growing.remove(best)
    return grant


def _value(jobs: list[ElasticDemand], grant: Mapping[str, int]) -> float:
    """Cluster goodput of a grant: the sum of the jobs' speedups."""
    return sum(d.curve.speedup(grant[d.name]) for d in jobs)


def allocate(cards: Iterable[FreeCard], jobs: Iterable[ElasticDemand], now: float,
             hysteresis: Hysteresis = DEFAULT_HYSTERESIS) -> dict[str, int]:
    """Workers per job (0: not admitted now). Deterministic; never over the cards, never
    a running job below its min while its min fits.

    Two plans are made: the best one (sizes changed within the interval held), and the one
    that keeps every running job at its size (waiting jobs still admitted and grown). The
    best is taken only if it beats keeping by ``min_gain`` of cluster goodput: a gain per job
    would let measurement noise move workers back and forth between jobs of similar value.

    The answer is a fixed point: granted and applied now, it is granted again. Without that,
    a size that was held but no longer fits (capacity shrank under a recently changed job)
    constrains this round's plan, changes anyway, and the next round — with the hold now on
    the new size — finds a better plan and moves other jobs too: two rescales for one.
    """
    cards = list(cards)
    jobs = list(jobs)
    grant = _allocate_once(cards, jobs, now, hysteresis)
    for _ in range(4):  # one more round almost always settles it; bounded in any case
        jobs = [replace(d, current=grant[d.name], changed_at=now) if grant[d.name] != d.current else d
                for d in jobs]
        again = _allocate_once(cards, jobs, now, hysteresis)
        if again == grant:
            break
        grant = again
    return grant


def _allocate_once(cards: list[FreeCard], jobs: list[ElasticDemand], now: float,
                   hysteresis: Hysteresis) -> dict[str, int]:
    ordered = sorted(jobs, key=lambda d: (d.arrival, d.name))
    running = {d.name: d.current for d in ordered if d.current >= d.min_replicas}
    recent = {d.name: d.current for d in ordered if d.name in running
              and now - d.changed_at < hysteresis.min_interval_seconds}
    best = _plan(cards, ordered, recent)
    keep = _plan(cards, ordered, running)
    if best == keep or _value(ordered, best) >= (1.0 + hysteresis.min_gain) * _value(ordered, keep):
        return best
    return keep
