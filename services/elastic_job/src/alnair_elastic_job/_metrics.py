"""Prometheus metrics of the elastic-job controller (served on the service's /metrics).

Per-job series (world size, target, goodput) carry ``namespace`` and ``job`` labels and are
removed when a job is forgotten, so their number is the number of known jobs; the other
labels are closed sets (phases, reason codes).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge

from ._controller import TrackedJob
from ._job_states import Phase

TRANSITIONS = Counter("alnair_elastic_job_transitions_total",
                      "Job state transitions, by the phase entered and its reason.", ["phase", "reason"])
JOBS = Gauge("alnair_elastic_job_jobs", "Known training jobs by phase.", ["phase"])
WORLD_SIZE = Gauge("alnair_elastic_job_world_size", "Workers in the job's current rendezvous.",
                   ["namespace", "job"])
TARGET = Gauge("alnair_elastic_job_target_replicas", "World size the controller drives the job to.",
               ["namespace", "job"])
GOODPUT = Gauge("alnair_elastic_job_goodput_ratio",
                "Share of the wall time since the job first ran that it spent Running.",
                ["namespace", "job"])
RESTARTS = Gauge("alnair_elastic_job_restarts", "Restarts the job has used.", ["namespace", "job"])
for _phase in Phase:
    JOBS.labels(_phase.value)


def transitioned(changed: Iterable[TrackedJob]) -> None:
    for t in changed:
        TRANSITIONS.labels(t.status.phase.value, t.status.reason).inc()


def observe(jobs: Iterable[TrackedJob], forgotten: Iterable[tuple[str, str]], now: float) -> None:
    """Bring every gauge to the jobs as they are now."""
    counts = dict.fromkeys(Phase, 0)
    for t in jobs:
        s, labels = t.status, (t.job.namespace, t.job.name)
        counts[s.phase] += 1
        WORLD_SIZE.labels(*labels).set(s.world_size)
        TARGET.labels(*labels).set(s.target)
        GOODPUT.labels(*labels).set(s.goodput(now))
        RESTARTS.labels(*labels).set(s.restarts)
    for phase, n in counts.items():
        JOBS.labels(phase.value).set(n)
    for labels in forgotten:
        for gauge in (WORLD_SIZE, TARGET, GOODPUT, RESTARTS):
            try:
                gauge.remove(*labels)
            except KeyError:
                pass
