"""The one job state table: phases, what leaves each, its timeout; the status; the inputs.

Users of elastic training cannot tell "waiting for peers" from "broken" (Kubeflow #1711):
here every phase says what it waits for, which input leaves it and how long it may last,
and the controller, the CLI and the published JobState all read this one table. The rules
that move between phases are in :mod:`._job_transitions`; both modules are pure (no clock,
no bus: ``now`` is an argument), so hypothesis can drive them through any order of inputs.

Worker bookkeeping is three nested sets, never counters, so that a worker reported twice is
still one worker: ``world ⊆ started ⊆ placed``; ``stopping ⊆ placed`` are workers the
controller asked to stop, whose exit is expected and is not a failure; ``ended`` are workers
whose exit was counted, so a redelivered or late report cannot count them again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from ._job_spec import TrainingJob

# A job that reports its steps is declared stalled after twice its slowest recent step
# without one, and never sooner than this (a GC pause, a checkpoint write).
STALL_FLOOR_SECONDS = 10.0
# Workers asked to stop (delete) get this long to report their exit before the job is
# declared deleted anyway; the adapters keep deleting pods and processes on their side.
STOP_GRACE_SECONDS = 30.0


class Phase(Enum):
    PENDING = "Pending"
    SCHEDULING = "Scheduling"
    RUNNING = "Running"
    RESCALING = "Rescaling"
    RECOVERING = "Recovering"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETING = "Deleting"
    DELETED = "Deleted"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.DELETED)


@dataclass(frozen=True)
class PhaseInfo:
    """One row of the table: what a phase means, what leaves it and its timeout."""

    meaning: str
    leaves_on: tuple[str, ...]
    timeout: str
    on_timeout: str


# What leaves a phase, by input kind; "deadline" is spec.deadlines.activeDeadlineSeconds
# (checked on every input) and the phase's own timeout fires on a "tick".
_ALWAYS = ("delete", "deadline")
TABLE: dict[Phase, PhaseInfo] = {
    Phase.PENDING: PhaseInfo(
        "known, waiting for the allocator to grant minReplicas workers", ("capacity", *_ALWAYS),
        "spec.deadlines.schedulingTimeoutSeconds", "Failed (PendingTimeout)"),
    Phase.SCHEDULING: PhaseInfo(
        "admitted: a gang of the target size is asked for, placed, started, then meets in a "
        "rendezvous", ("rendezvous-complete", "workers-placed", "worker-started", "capacity",
                       "worker-exited", "worker-refused", *_ALWAYS),
        "spec.deadlines.schedulingTimeoutSeconds",
        "target lowered to minReplicas and retried once; at minReplicas Failed (SchedulingTimeout)"),
    Phase.RUNNING: PhaseInfo(
        "training with a world size within minReplicas..maxReplicas",
        ("worker-exited", "workers-placed", "worker-refused", "capacity", "scale", *_ALWAYS),
        "none for a job that reports no steps; for one that does, 2× its slowest recent step "
        f"(at least {STALL_FLOOR_SECONDS:.0f} s) without a step; once a worker exited 0 "
        "(Completing) spec.deadlines.rendezvousTimeoutSeconds",
        "Recovering (Stalled), one restart used; Completing: Succeeded, the stragglers stopped"),
    Phase.RESCALING: PhaseInfo(
        "changing the world size: workers added or stopped, the rest meet in a new rendezvous",
        ("rendezvous-complete", "workers-placed", "worker-started", "worker-exited",
         "worker-refused", "capacity", *_ALWAYS),
        "spec.deadlines.rendezvousTimeoutSeconds", "Recovering (RendezvousTimeout), one restart used"),
    Phase.RECOVERING: PhaseInfo(
        "a worker failed: every worker is stopped and the job waits its restart back-off",
        _ALWAYS, "the back-off of spec.restartPolicy",
        "Scheduling a new gang (Pending if capacity is below minReplicas)"),
    Phase.DELETING: PhaseInfo(
        "stopping every worker", ("worker-exited",), f"{STOP_GRACE_SECONDS:.0f} s stop grace",
        "Deleted"),
    Phase.SUCCEEDED: PhaseInfo("finished: a worker exited 0 and the rest have ended", (), "none", "-"),
    Phase.FAILED: PhaseInfo("ended by a failure the restart policy does not cover", (), "none", "-"),
    Phase.DELETED: PhaseInfo("deleted by its owner", (), "none", "-"),
}


def state_table_markdown() -> str:
    """The table as Markdown (the service README embeds it; the CLI may print it)."""
    rows = ["| phase | means | left by | timeout | on timeout |", "|---|---|---|---|---|"]
    for phase, info in TABLE.items():
        rows.append(f"| {phase.value} | {info.meaning} | {', '.join(info.leaves_on) or '(terminal)'} "
                    f"| {info.timeout} | {info.on_timeout} |")
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class JobStatus:
    """Where one job stands. Replaced, never mutated: each transition is a new value."""

    phase: Phase
    reason: str
    message: str
    created_at: float
    entered_at: float
    generation: int = 1
    restarts: int = 0
    grant: int = 0              # workers the allocator lets this job have
    wish: int | None = None     # the user's `alnair job scale` value
    target: int = 0             # world size the controller drives towards
    placed: frozenset[str] = frozenset()
    started: frozenset[str] = frozenset()
    world: frozenset[str] = frozenset()
    stopping: frozenset[str] = frozenset()
    ended: frozenset[str] = frozenset()   # exited workers: a late duplicate report is ignored
    heard: frozenset[str] = frozenset()   # members of the newest round not yet in effect
    heard_round: int = 0
    running_seconds: float = 0.0          # time spent Running before the current phase
    first_run_at: float | None = None     # when it first ran
    # Gangs started from none so far: each gets a fresh rendezvous id, so workers of a new
    # gang never join the closed rendezvous of the last one (torch's RendezvousClosedError).
    incarnation: int = 0
    # Steps reported by the job's workers: the newest step, when it came in this world
    # (None: none yet since the world formed), and a slow-decaying maximum of step times.
    step: int = 0
    last_step_at: float | None = None
    slowest_step: float = 0.0
    succeeded: int = 0
    retry_at: float = 0.0
    # Newcomers refused in a row (reset when a worker starts), and until when the job does
    # not ask for more workers than it has: the restart back-off, doubling per refusal.
    refusals: int = 0
    grow_after: float = 0.0
    cause: str = "submitted"
    previous: Phase | None = None

    @property
    def alive(self) -> frozenset[str]:
        """Workers that count: placed and not asked to stop."""
        return self.placed - self.stopping

    @property
    def world_size(self) -> int:
        return len(self.world)

    @property
    def completing(self) -> bool:
        return self.phase is Phase.RUNNING and self.succeeded > 0

    def goodput(self, now: float) -> float:
        """Share of the wall time since the job first ran that it spent Running.

        The controller's view: an upper bound of useful step time / wall time, until workers
        report their step times (steps redone after a restart from a checkpoint still count
        here as useful)."""
        if self.first_run_at is None or now <= self.first_run_at:
            return 0.0
        running = self.running_seconds + (now - self.entered_at if self.phase is Phase.RUNNING else 0.0)
        return max(0.0, min(1.0, running / (now - self.first_run_at)))


def submitted(now: float) -> JobStatus:
    return JobStatus(Phase.PENDING, "WaitingForCapacity", "waiting for the allocator to grant "
                     "minReplicas workers", created_at=now, entered_at=now)


_TIMEOUTS: dict[Phase, Callable[[TrainingJob, JobStatus], float | None]] = {
    Phase.PENDING: lambda j, s: j.deadlines.scheduling_timeout_seconds,
    Phase.SCHEDULING: lambda j, s: j.deadlines.scheduling_timeout_seconds,
    Phase.RUNNING: lambda j, s: _running_timeout(j, s),
    Phase.RESCALING: lambda j, s: j.deadlines.rendezvous_timeout_seconds,
    Phase.RECOVERING: lambda j, s: max(0.0, s.retry_at - s.entered_at),
    Phase.DELETING: lambda j, s: STOP_GRACE_SECONDS,
}


def stall_window(s: JobStatus) -> float:
    return max(STALL_FLOOR_SECONDS, 2.0 * s.slowest_step)


def _running_timeout(j: TrainingJob, s: JobStatus) -> float | None:
    """Completing: the stragglers' grace. A job that reports steps: no step within the stall
    window (the first step of a new world also gets the rendezvous timeout: it restores a
    checkpoint). Otherwise none: only an input leaves Running."""
    if s.completing:
        return j.deadlines.rendezvous_timeout_seconds
    if not s.slowest_step:
        return None
    if s.last_step_at is None:
        return j.deadlines.rendezvous_timeout_seconds + stall_window(s)
    return s.last_step_at + stall_window(s) - s.entered_at


def rendezvous_id(job: TrainingJob, s: JobStatus) -> str:
    """``<namespace>.<name>.<incarnation>``: one per gang started from none; kept while the
    same workers rescale (torch elastic re-rendezvous under one id)."""
    return f"{job.namespace}.{job.name}.{s.incarnation}"


def timeout_seconds(job: TrainingJob, status: JobStatus) -> float | None:
    """Seconds in the current phase before it times out; None: only an input leaves it."""
    rule = _TIMEOUTS.get(status.phase)
    return rule(job, status) if rule else None


# The inputs. Each is one fact from the bus (or the clock); ``kind`` is the published cause.
@dataclass(frozen=True)
class CapacityChanged:
    """The allocator's grant for this job changed (capacity freed or taken). ``never_fits``:
    why not even the idle cluster holds minReplicas of its workers ("" when it does, or when
    the cluster's cards are not known)."""

    grant: int
    never_fits: str = ""
    kind: str = field(default="capacity", init=False)


@dataclass(frozen=True)
class WorkersPlaced:
    """The scheduler bound these workers (a gang, or single workers when growing).
    ``rendezvous_id`` is their gang (their label): a worker made for an earlier gang — its
    adapter carried out an old plan late, after the job had restarted — is no member of this
    one (it can only meet in the old gang's rendezvous; the adapter stops it), and counting it
    made its exit a failure of the new gang."""

    workers: frozenset[str]
    rendezvous_id: str = ""
    kind: str = field(default="workers-placed", init=False)


@dataclass(frozen=True)
class WorkerStarted:
    worker: str
    kind: str = field(default="worker-started", init=False)


@dataclass(frozen=True)
class WorkerExited:
    """A worker ended: its exit code, or None when it was lost (pod deleted, node gone,
    missed heartbeat). ``name`` is the workload's name, which messages give: the uid is how the
    state machine knows it, but ``alnair ps`` and ``kubectl`` show names."""

    worker: str
    code: int | None
    detail: str = ""
    name: str = field(default="", compare=False)
    kind: str = field(default="worker-exited", init=False)


@dataclass(frozen=True)
class WorkerRefused:
    """The scheduler will never place this worker (its request is larger than any card, it is
    invalid, or binding it failed every time) and says so once: waiting out the scheduling
    timeout cannot help. ``rendezvous_id`` is the worker's gang (its label); a refusal of an
    earlier gang's worker changes nothing."""

    worker: str
    code: str
    reason: str
    rendezvous_id: str = ""
    kind: str = field(default="worker-refused", init=False)


@dataclass(frozen=True)
class RendezvousComplete:
    """The job's rendezvous host closed round ``round`` (numbered from 1) with these members.

    Rounds arrive on another stream than the workers' lifecycle, so a round may come before
    the placement of its members: it is kept (``heard``) and takes effect once every member
    is one of the job's live workers; a round older than one already heard is ignored, and so
    is a round of another gang's rendezvous (``rendezvous_id``; rounds are numbered per
    rendezvous, and each new gang meets in a new one). An empty id is taken as the current
    gang's."""

    members: frozenset[str]
    round: int
    rendezvous_id: str = ""
    kind: str = field(default="rendezvous-complete", init=False)


@dataclass(frozen=True)
class StepReported:
    """The job reached training step ``step``; its last step took ``step_seconds``. Only
    newer steps count, so a repeated or late report changes nothing."""

    step: int
    step_seconds: float
    kind: str = field(default="step", init=False)


@dataclass(frozen=True)
class ScaleCommand:
    replicas: int
    kind: str = field(default="scale", init=False)


@dataclass(frozen=True)
class DeleteCommand:
    kind: str = field(default="delete", init=False)


@dataclass(frozen=True)
class Tick:
    """Time passed: timeouts, the back-off and the active deadline are checked."""

    kind: str = field(default="tick", init=False)


JobInput = (CapacityChanged | WorkersPlaced | WorkerStarted | WorkerExited | WorkerRefused
            | RendezvousComplete | StepReported | ScaleCommand | DeleteCommand | Tick)

# Refusals about a whole gang, not a worker: the controller's own scheduling timeout (with
# its retry at minReplicas) and its plans decide what happens to its gangs.
GANG_REFUSALS = frozenset({"gang-timeout", "pod-group-deleted", "pod-group-missing"})
