"""Simulation bench: the elastic GPU allocator against static allocation on a job trace.

Run from the repository root::

    .venv/bin/python services/elastic_job/bench/allocator_sim.py [--seeds 5] [--jobs 160]

The trace is synthetic (no public trace is reachable from here) and documented here:

* **Cluster**: 4 nodes × 4 GPUs (80 GiB, 100 % each) = 16 GPUs.
* **Arrivals**: a Poisson process, mean inter-arrival 6 min (10 jobs/h), ``--jobs`` jobs.
* **Workers**: 60 % of jobs ask for whole GPUs (1 per worker), 40 % for a share of
  one card (50 % compute, 40 GiB: two per card).
* **Sizes**: ``min`` is 1 (60 %) or 2 (40 %); ``max`` is ``min × 2`` or ``min × 4``
  (half each): 2, 4 or 8 workers. The job's *request* (the static baseline) is its ``max``.
* **Durations**: the time the job would take on one worker is log-normal, median 1 h,
  σ = 1.0, clipped to 5 min … 12 h (Philly/Helios-like heavy tail).
* **Scaling**: ``x(n) = n / (1 + s·(n − 1))`` (Amdahl-like) with ``s`` uniform in
  0 … 0.25: from near-linear jobs to ones that gain little past 4 workers. Half the jobs
  have measured throughput at 1, 2, 4 and 8 workers (what the profiler would provide);
  the other half are unmeasured and the allocator assumes linear scaling with 0.9
  efficiency — it is wrong about them, as it would be in life. Measurements are noisy:
  each allocation round sees each measured point times a log-normal factor (σ = 0.1).
* **Rescale cost**: each change of a job's world size stops its progress for 30 s
  (stop, new rendezvous, checkpoint reload).

Policies, all admitting in arrival order with backfill and checking every grant by packing
the cards (``alnair_elastic_job.fits``): **static-min** (every job at its min, never
changed), **static-request** (every job at its request, i.e. its max, admitted only when
all of it fits), **elastic** (``alnair_elastic_job.allocate`` on every arrival and
completion and every 5 min; hysteresis: 10 % minimum gain, 5 min between rescales), and
**elastic-no-hyst**, the same without hysteresis, to show what it saves.

Metrics: mean and p90 job completion time (arrival → finish), makespan, GPU share allocated
(time average) and cluster goodput: useful work done per second in perfectly-scaled GPU
equivalents (``Σ x_j(n_j) × GPUs per worker``) over the 16 GPUs, averaged to the makespan.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import dataclass, field, replace

from alnair_elastic_job import (
    ElasticDemand,
    FreeCard,
    Hysteresis,
    ScalingCurve,
    WorkerRequest,
    allocate,
    fits,
)

CARDS = [FreeCard(f"node{n}", f"node{n}-gpu{g}", 80, 100) for n in range(4) for g in range(4)]
WHOLE, SHARE = WorkerRequest(whole_gpus=1), WorkerRequest(40, 50)
DT = 10.0
RESCALE_PAUSE = 30.0
REALLOCATE_EVERY = 300.0
HYSTERESIS = Hysteresis(min_gain=0.1, min_interval_seconds=300.0)
NOISE = 0.1


@dataclass
class Job:
    name: str
    arrival: float
    lo: int
    hi: int
    request: WorkerRequest
    serial: float
    work: float               # single-worker seconds
    measured: bool
    done: float = 0.0
    size: int = 0
    changed_at: float = -math.inf
    paused_until: float = 0.0
    finished: float | None = None
    history: list[int] = field(default_factory=list)

    def rate(self, n: int) -> float:
        return n / (1.0 + self.serial * (n - 1)) if n > 0 else 0.0

    def demand(self, noise: random.Random) -> ElasticDemand:
        # Each round sees a fresh measurement, ±10 % (log-normal): samples/s fluctuate.
        curve = (ScalingCurve.of({n: self.rate(n) * noise.lognormvariate(0.0, NOISE)
                                  for n in (1, 2, 4, 8)}) if self.measured
                 else ScalingCurve(efficiency=0.9))
        return ElasticDemand(self.name, self.lo, self.hi, self.request, curve, current=self.size,
                             changed_at=self.changed_at, arrival=self.arrival)


def trace(seed: int, count: int) -> list[Job]:
    rnd, t, jobs = random.Random(seed), 0.0, []
    for i in range(count):
        t += rnd.expovariate(1.0 / 360.0)
        lo = 1 if rnd.random() < 0.6 else 2
        hi = lo * (2 if rnd.random() < 0.5 else 4)
        single = min(12 * 3600.0, max(300.0, rnd.lognormvariate(math.log(3600.0), 1.0)))
        jobs.append(Job(f"job{i:03d}", t, lo, hi, WHOLE if rnd.random() < 0.6 else SHARE,
                        rnd.uniform(0.0, 0.25), single, rnd.random() < 0.5))
    return jobs


def _static(active: list[Job], at_max: bool) -> dict[str, int]:
    grant, placed = {}, []
    for j in sorted(active, key=lambda j: j.arrival):
        want = j.size or (j.hi if at_max else j.lo)
        if j.size or fits(CARDS, [*placed, *[j.request] * want]):
            placed += [j.request] * want
            grant[j.name] = want
        else:
            grant[j.name] = 0
    return grant


def simulate(jobs: list[Job], policy: str) -> dict[str, float]:
    jobs = [replace(j, history=[]) for j in jobs]
    now, pending, active, done = 0.0, list(jobs), [], []
    noise = random.Random(1234)
    last_alloc, dirty, allocated, useful = -math.inf, True, 0.0, 0.0
    while pending or active:
        while pending and pending[0].arrival <= now:
            active.append(pending.pop(0))
            dirty = True
        if dirty or (policy.startswith("elastic") and now - last_alloc >= REALLOCATE_EVERY):
            if policy.startswith("elastic"):
                h = HYSTERESIS if policy == "elastic" else Hysteresis(0.0, 0.0)
                grant = allocate(CARDS, [j.demand(noise) for j in active], now, h)
            else:
                grant = _static(active, at_max=policy == "static-request")
            for j in active:
                if grant[j.name] != j.size:
                    if j.size:  # a running job that changes size pauses; a start does not
                        j.paused_until = now + RESCALE_PAUSE
                    j.size, j.changed_at = grant[j.name], now
                    j.history.append(j.size)
            last_alloc, dirty = now, False
        for j in list(active):
            allocated += j.size * j.request.gpus * DT
            if j.size == 0 or now < j.paused_until:
                continue
            rate = j.rate(j.size)
            useful += rate * j.request.gpus * DT
            if j.done + rate * DT >= j.work:
                j.finished = now + (j.work - j.done) / rate
                active.remove(j)
                done.append(j)
                dirty = True
            else:
                j.done += rate * DT
        now += DT
    jct = sorted(j.finished - j.arrival for j in done)
    makespan = max(j.finished for j in done)
    gpus = sum(c.compute_percent for c in CARDS) / 100.0
    return {
        "mean_jct_h": statistics.fmean(jct) / 3600.0,
        "p90_jct_h": jct[int(0.9 * (len(jct) - 1))] / 3600.0,
        "makespan_h": makespan / 3600.0,
        "allocated": allocated / (makespan * gpus),
        "goodput": useful / (makespan * gpus),
        "rescales": sum(max(0, len(j.history) - 1) for j in done),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=160)
    args = ap.parse_args()
    policies = ("static-min", "static-request", "elastic", "elastic-no-hyst")
    rows: dict[str, list[dict[str, float]]] = {p: [] for p in policies}
    for seed in range(args.seeds):
        jobs = trace(seed, args.jobs)
        for p in policies:
            rows[p].append(simulate(jobs, p))
    print(f"{args.jobs} jobs, seeds 0..{args.seeds - 1}, 16 GPUs; mean over seeds [min … max]")
    print(f"{'policy':16} {'mean JCT h':>20} {'p90 JCT h':>20} {'makespan h':>20} "
          f"{'allocated':>8} {'goodput':>8} {'rescales':>8}")
    for p in policies:
        def cell(key: str, rs: list[dict[str, float]] = rows[p]) -> str:
            v = [r[key] for r in rs]
            return f"{statistics.fmean(v):6.2f} [{min(v):5.2f} … {max(v):5.2f}]"
        print(f"{p:16} {cell('mean_jct_h'):>20} {cell('p90_jct_h'):>20} {cell('makespan_h'):>20} "
              f"{statistics.fmean(r['allocated'] for r in rows[p]):8.1%} "
              f"{statistics.fmean(r['goodput'] for r in rows[p]):8.1%} "
              f"{statistics.fmean(r['rescales'] for r in rows[p]):8.0f}")
    for base in ("static-min", "static-request"):
        jct = [b["mean_jct_h"] / e["mean_jct_h"] for b, e in zip(rows[base], rows["elastic"], strict=True)]
        good = [e["goodput"] / b["goodput"] for b, e in zip(rows[base], rows["elastic"], strict=True)]
        print(f"elastic vs {base}: mean JCT {statistics.fmean(jct):.2f}× shorter "
              f"[{min(jct):.2f} … {max(jct):.2f}], goodput {statistics.fmean(good):.2f}× "
              f"[{min(good):.2f} … {max(good):.2f}]")


if __name__ == "__main__":
    main()
