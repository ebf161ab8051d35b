"""The controller's model: every job with its status, moved only by the state machine.

Plain Python over domain objects (the service wires it to the bus): each method takes the
facts and ``now`` and returns the jobs whose status changed, which the service publishes.
What the adapters must do for a job — create workers up to the target, stop the ones the
machine marked — is :func:`worker_actions`, derived from the status alone, so a restarted
controller or a redelivered event asks for the same thing again rather than for more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._allocator import (
    DEFAULT_HYSTERESIS,
    ElasticDemand,
    FreeCard,
    Hysteresis,
    ScalingCurve,
    allocate,
    never_fits,
)
from ._errors import JobSpecError, TransitionError
from ._job_spec import TrainingJob
from ._job_states import CapacityChanged, DeleteCommand, JobInput, JobStatus, Phase, Tick, submitted
from ._job_transitions import forgotten, step


def job_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


@dataclass
class TrackedJob:
    job: TrainingJob
    status: JobStatus

    @property
    def key(self) -> str:
        return job_key(self.job.namespace, self.job.name)


@dataclass(frozen=True)
class WorkerActions:
    """What the adapters should do now: ``create`` more workers, stop ``stop``.

    ``gang`` is the PodGroup's ``minMember`` when the workers start from none (a new gang:
    all of ``minReplicas`` or nothing, so no partial gang holds GPUs while it waits), and 0
    when workers are added to a running job one by one."""

    create: int
    stop: frozenset[str]
    gang: int = 0


def worker_actions(t: TrackedJob) -> WorkerActions:
    s = t.status
    # Workers are added only while the job gathers or runs a world: not while it waits
    # (Pending), backs off (Recovering), ends (Deleting, terminal) or completes.
    growing = s.phase in (Phase.SCHEDULING, Phase.RESCALING, Phase.RUNNING) and not s.completing
    want = max(0, s.target - len(s.alive)) if growing else 0
    gang = t.job.min_replicas if want and not s.alive and s.phase is Phase.SCHEDULING else 0
    return WorkerActions(want, s.stopping, gang)


class Controller:
    def __init__(self, hysteresis: Hysteresis = DEFAULT_HYSTERESIS) -> None:
        self.jobs: dict[str, TrackedJob] = {}
        self.hysteresis = hysteresis
        self.curves: dict[str, ScalingCurve] = {}
        self._changed_at: dict[str, float] = {}

    def restore(self, tracked: TrackedJob) -> None:
        """Take back a job as a previous run left it (from its record)."""
        self.jobs[tracked.key] = tracked
        self._changed_at[tracked.key] = tracked.status.entered_at

    def submit(self, job: TrainingJob, now: float) -> list[TrackedJob]:
        """A new job starts Pending; the same spec again changes nothing (a redelivered
        command); another spec for a live job is refused; a finished one may be replaced."""
        key = job_key(job.namespace, job.name)
        old = self.jobs.get(key)
        if old is not None and not old.status.phase.terminal:
            if old.job == job:
                return []
            raise JobSpecError("metadata.name", f"job {key} exists and is {old.status.phase.value}; "
                               "delete it first or choose another name")
        tracked = TrackedJob(job, submitted(now))
        self.jobs[key] = tracked
        return [tracked]

    def apply(self, key: str, event: JobInput, now: float) -> list[TrackedJob]:
        """Step one job; a delete of a finished job forgets it, after one last status
        (Deleted, ``forgotten``) whose plan removes what the job left behind."""
        tracked = self.jobs.get(key)
        if tracked is None:
            if isinstance(event, CapacityChanged | Tick):
                return []
            raise TransitionError(f"no training job {key}; `alnair job ls` lists them")
        if isinstance(event, DeleteCommand) and tracked.status.phase.terminal:
            del self.jobs[key]
            return [TrackedJob(tracked.job, forgotten(tracked.status, now))]
        return self._step(tracked, event, now)

    def _step(self, tracked: TrackedJob, event: JobInput, now: float) -> list[TrackedJob]:
        new = step(tracked.job, tracked.status, event, now)
        if new is tracked.status:
            return []
        if new.world_size != tracked.status.world_size:
            self._changed_at[tracked.key] = now
        tracked.status = new
        return [tracked]

    def tick(self, now: float) -> list[TrackedJob]:
        changed: list[TrackedJob] = []
        for tracked in list(self.jobs.values()):
            changed += self._step(tracked, Tick(), now)
        return changed

    def reallocate(self, cards: Iterable[FreeCard], now: float,
                   cluster: Sequence[FreeCard] | None = None) -> list[TrackedJob]:
        """Divide the cards among the live jobs and hand each its grant; ``cluster`` (every
        healthy card at its full size) tells a pending job that could never be granted why."""
        live = [t for t in self.jobs.values() if not t.status.phase.terminal]
        grant = allocate(cards, [self._demand(t) for t in live], now, self.hysteresis)
        changed: list[TrackedJob] = []
        for t in live:
            short = ""
            if cluster is not None and t.status.phase is Phase.PENDING and grant[t.key] < t.job.min_replicas:
                short = never_fits(cluster, t.job.request, t.job.min_replicas)
            changed += self._step(t, CapacityChanged(grant[t.key], short), now)
        return changed

    def _demand(self, t: TrackedJob) -> ElasticDemand:
        s = t.status
        return ElasticDemand(t.key, t.job.min_replicas, t.job.max_replicas, t.job.request,
                             self.curves.get(t.key, ScalingCurve()),
                             current=s.target if s.target >= t.job.min_replicas else 0,
                             changed_at=self._changed_at.get(t.key, float("-inf")),
                             arrival=s.created_at)

    def measured(self, key: str, samples_per_second: Mapping[int, float]) -> None:
        """Throughput of a job per world size (from the profiler), for the allocator."""
        self.curves[key] = ScalingCurve.of(samples_per_second)
