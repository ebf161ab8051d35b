"""The rules of the job state machine: ``step(job, status, input, now) -> status``.

A pure function: the same inputs give the same status, and an input that changes nothing
returns the very same object (the controller publishes a JobState exactly when the result
``is not`` the status it passed in). Terminal phases ignore everything. Decisions follow
torchrun's semantics where they exist: a worker that exits 0 has finished training; any
other exit is a failure that uses one restart; an elastic job whose survivors still number
``minReplicas`` goes on with them (Rescaling) instead of restarting everyone, and the
controller asks for a replacement as capacity allows.
"""

from __future__ import annotations

from dataclasses import replace

from ._errors import TransitionError
from ._job_spec import Launcher, TrainingJob
from ._job_states import (
    GANG_REFUSALS,
    CapacityChanged,
    DeleteCommand,
    JobInput,
    JobStatus,
    Phase,
    RendezvousComplete,
    ScaleCommand,
    StepReported,
    Tick,
    WorkerExited,
    WorkerRefused,
    WorkersPlaced,
    WorkerStarted,
    rendezvous_id,
    stall_window,
    submitted,
    timeout_seconds,
)

_GROWING = (Phase.SCHEDULING, Phase.RESCALING, Phase.RUNNING)


def step(job: TrainingJob, s: JobStatus, event: JobInput, now: float) -> JobStatus:
    """The status after ``event``; TransitionError (status unchanged) for a refused command."""
    if s.phase.terminal:
        return s
    if isinstance(event, DeleteCommand):
        return _delete(s, now)
    deadline = job.deadlines.active_deadline_seconds
    if deadline and now >= s.created_at + deadline and s.phase is not Phase.DELETING:
        return _fail(s, "DeadlineExceeded", f"the job ran past spec.deadlines.activeDeadlineSeconds="
                     f"{deadline:.0f} s since its submission", now, event.kind)
    if isinstance(event, Tick):
        return _tick(job, s, now)
    if isinstance(event, CapacityChanged):
        return _retarget(job, replace(s, grant=max(0, event.grant)), s, now, event.kind,
                         event.never_fits)
    if isinstance(event, ScaleCommand):  # the user asks: a refusal's hold is lifted
        return _retarget(job, replace(s, wish=_checked_scale(job, event.replicas), refusals=0,
                                      grow_after=0.0), s, now, event.kind)
    if isinstance(event, WorkersPlaced):
        if event.rendezvous_id not in ("", rendezvous_id(job, s)):
            return s  # another gang's worker: never a member of this one
        return _placed(job, s, event.workers, now)
    if isinstance(event, WorkerStarted):
        if event.worker not in s.alive or event.worker in s.started:
            return s
        return _settle(job, s, replace(s, started=s.started | {event.worker}, refusals=0), now,
                       event.kind)
    if isinstance(event, WorkerExited):
        return _exited(job, s, event, now)
    if isinstance(event, WorkerRefused):
        return _refused(job, s, event, now)
    if isinstance(event, StepReported):
        if s.phase is not Phase.RUNNING or event.step <= s.step or not event.step_seconds > 0:
            return s
        slow = max(min(event.step_seconds, 86400.0), 0.9 * s.slowest_step)
        return _update(s, event.kind, step=event.step, last_step_at=now, slowest_step=slow)
    if isinstance(event, RendezvousComplete):
        if event.round <= s.heard_round or event.rendezvous_id not in ("", rendezvous_id(job, s)):
            return s
        return _settle(job, s, replace(s, heard=event.members, heard_round=event.round), now,
                       event.kind)
    raise TypeError(f"not a job input: {event!r}")


def _refused(job: TrainingJob, s: JobStatus, event: WorkerRefused, now: float) -> JobStatus:
    """A gang being scheduled that the scheduler can never complete fails at once, with the
    scheduler's reason. A running or rescaling elastic job gives up on the refused worker (a
    replacement, or one to grow by; pending, or bound and not started) and goes on with the
    workers it has: its target becomes their number, so the adapters withdraw the refused one
    and the job does not wait for it (a growing job went on to time out its rendezvous and
    restart). It asks for more again after the restart back-off of spec.restartPolicy,
    doubled for each newcomer refused in a row (reset when a worker starts, lifted by a
    scale command): asked at each reallocation, a refused newcomer was created, refused and
    withdrawn at the scheduler's pace."""
    if (event.code in GANG_REFUSALS or event.worker in s.stopping | s.ended
            or event.rendezvous_id not in ("", rendezvous_id(job, s))):
        return s
    if s.phase is not Phase.SCHEDULING:
        w = event.worker
        if not (job.elastic and s.phase in (Phase.RUNNING, Phase.RESCALING)) or w in s.started:
            return s  # a started worker was placed: a late or stray refusal
        if w not in s.placed and s.target <= len(s.alive):
            return s  # no worker is asked for: nothing to give up on
        hold = job.restart.backoff(s.refusals)
        gone = replace(s, placed=s.placed - {w}, world=s.world - {w}, heard=s.heard - {w},
                       ended=s.ended | {w}, target=len(s.alive - {w}), refusals=s.refusals + 1,
                       grow_after=now + hold)
        what = f"the scheduler refused worker {w} ({event.code or 'refused'}: {event.reason})"
        if len(gone.alive) < job.min_replicas:
            return _restart(job, gone, "WorkerRefused", what, now, event.kind)
        if _ready(job, gone):
            return _settle(job, s, gone, now, event.kind)
        going_on = (f"{what}; going on with {len(gone.alive)} workers, asking for more in "
                    f"{hold:.0f} s (refusal {gone.refusals} in a row)")
        # Growing by it, the world never stopped: with nobody else to wait for, it trains on.
        # (After a failure the survivors meet anew: Rescaling until their round closes.)
        if s.reason == "ScalingUp" and gone.world and gone.alive == gone.world:
            return _move(gone, Phase.RUNNING, "Training", going_on, now, event.kind)
        return _move(gone, s.phase, s.reason, going_on, now, event.kind)
    return _fail(s, "Unschedulable", f"the scheduler cannot place worker {event.worker} and says "
                 f"retrying cannot help ({event.code or 'refused'}): {event.reason}. Lower the job's "
                 "spec.worker request to what one card has, or add a card that fits, and resubmit",
                 now, event.kind)


def desired(job: TrainingJob, s: JobStatus) -> int:
    """The world size wanted if capacity were no object: the user's scale, else the max."""
    if job.launcher is Launcher.TORCH or s.wish is None:
        return job.max_replicas
    return s.wish


def _checked_scale(job: TrainingJob, n: int) -> int:
    if not job.elastic:
        raise TransitionError(f"job {job.name} has a fixed world size of {job.min_replicas} "
                              f"(launcher {job.launcher.value}, minReplicas == maxReplicas); resubmit "
                              "it with launcher: torch-elastic (or torch-inprocess) and a wider range to scale it")
    if not job.min_replicas <= n <= job.max_replicas:
        raise TransitionError(f"job {job.name} may have {job.min_replicas}..{job.max_replicas} "
                              f"workers (spec.minReplicas..spec.maxReplicas), not {n}")
    return n


def _move(s: JobStatus, phase: Phase, reason: str, message: str, now: float, cause: str,
          *, reenter: bool = False, **changes: object) -> JobStatus:
    entered = now if reenter or phase is not s.phase else s.entered_at
    ran = s.running_seconds + (now - s.entered_at if s.phase is Phase.RUNNING and entered == now else 0.0)
    first = now if s.first_run_at is None and phase is Phase.RUNNING else s.first_run_at
    fresh = phase is Phase.SCHEDULING and s.phase is not Phase.SCHEDULING
    if fresh:  # a new gang meets in a new rendezvous, whose rounds count from 1 again
        changes = {"heard": frozenset(), "heard_round": 0, **changes}
    # A new world (or any other phase) waits for its own first step.
    same_world = phase is Phase.RUNNING and s.phase is Phase.RUNNING and \
        changes.get("world", s.world) == s.world
    last_step = s.last_step_at if same_world else None
    return replace(s, phase=phase, reason=reason, message=message, entered_at=entered,
                   generation=s.generation + 1, cause=cause, previous=s.phase,
                   running_seconds=ran, first_run_at=first, last_step_at=last_step,
                   incarnation=s.incarnation + fresh, **changes)


def _update(s: JobStatus, cause: str, **changes: object) -> JobStatus:
    new = replace(s, **changes)
    return s if new == s else replace(new, generation=s.generation + 1, cause=cause)


def _fail(s: JobStatus, reason: str, message: str, now: float, cause: str) -> JobStatus:
    return _move(s, Phase.FAILED, reason, message, now, cause, stopping=s.placed, world=frozenset())


def _delete(s: JobStatus, now: float) -> JobStatus:
    if s.phase is Phase.DELETING:
        return s
    if not s.placed:
        return _move(s, Phase.DELETED, "Deleted", "deleted; it had no workers", now, "delete")
    return _move(s, Phase.DELETING, "StoppingWorkers", f"stopping {len(s.placed)} workers", now,
                 "delete", stopping=s.placed, world=frozenset())


def forgotten(s: JobStatus, now: float) -> JobStatus:
    """The last status of a job that ended and is now deleted: Deleted, one generation on.

    Its end kept what it left (a finished job's pods, for their logs); this status's plan
    (target 0, phase Deleted) is what tells the adapters to remove that too, so a delete
    removes the same things whether the job was still running or not. The controller
    forgets the job once it is published."""
    if s.phase is Phase.DELETED:
        message = "forgotten; anything of it still left is removed"
    else:
        message = f"deleted after it ended ({s.phase.value}): its finished workers are removed"
    return _move(s, Phase.DELETED, "Deleted", message, now, "delete", reenter=True,
                 world=frozenset(), target=0)


def _restart(job: TrainingJob, s: JobStatus, reason: str, message: str, now: float,
             cause: str) -> JobStatus:
    """One restart used: every worker stopped, a new gang after the back-off."""
    used = s.restarts + 1
    if used > job.restart.max_restarts:
        return _fail(replace(s, restarts=used), "RestartsExhausted",
                     f"{message}; {used} failures exceed spec.restartPolicy.maxRestarts="
                     f"{job.restart.max_restarts}", now, cause)
    wait = job.restart.backoff(s.restarts)
    return _move(s, Phase.RECOVERING, reason, f"{message}; restart {used} of "
                 f"{job.restart.max_restarts} in {wait:g} s", now, cause, reenter=True,
                 restarts=used, stopping=s.placed, world=frozenset(), retry_at=now + wait)


def _tick(job: TrainingJob, s: JobStatus, now: float) -> JobStatus:
    limit = timeout_seconds(job, s)
    if limit is None or now < s.entered_at + limit:
        return s
    if s.phase is Phase.PENDING:
        why = f": {s.message}" if s.reason == "Unschedulable" else ""
        return _fail(s, "PendingTimeout", f"no grant of minReplicas={job.min_replicas} workers "
                     f"({job.request.gpus:g} GPU each) within {limit:.0f} s{why}", now, "tick")
    if s.phase is Phase.SCHEDULING:
        if s.target > job.min_replicas:
            return _retarget_to(s, job.min_replicas, Phase.SCHEDULING, "ScaledDownToMin",
                                f"{s.target} workers did not start and meet within {limit:.0f} s; "
                                f"trying minReplicas={job.min_replicas}", now, "tick", reenter=True)
        return _fail(s, "SchedulingTimeout", f"{len(s.started)} of {s.target} workers started and "
                     f"met within {limit:.0f} s (spec.deadlines.schedulingTimeoutSeconds)", now, "tick")
    if s.phase is Phase.RUNNING and not s.completing:
        since = f"step {s.step}" if s.last_step_at is not None else "the rendezvous"
        quiet = now - (s.last_step_at if s.last_step_at is not None else s.entered_at)
        return _restart(job, s, "Stalled", f"no training step for {quiet:.0f} s since {since} "
                        f"(2× the slowest recent step, {s.slowest_step:.1f} s, at least "
                        f"{stall_window(s):.0f} s): a collective is likely hung", now, "tick")
    if s.phase is Phase.RUNNING:  # completing: the stragglers are stopped
        return _move(s, Phase.SUCCEEDED, "Succeeded", f"{s.succeeded} workers finished; "
                     f"{len(s.alive)} still running after {limit:.0f} s were stopped", now, "tick",
                     stopping=s.placed, world=frozenset())
    if s.phase is Phase.RESCALING:
        return _restart(job, s, "RendezvousTimeout", f"no rendezvous of {s.target} workers within "
                        f"{limit:.0f} s (spec.deadlines.rendezvousTimeoutSeconds)", now, "tick")
    if s.phase is Phase.RECOVERING:
        return _regroup(job, s, now, "tick")
    return _move(s, Phase.DELETED, "Deleted", f"{len(s.placed)} workers did not confirm their stop "
                 f"within {limit:.0f} s; the adapters go on deleting them", now, "tick")


def _regroup(job: TrainingJob, s: JobStatus, now: float, cause: str) -> JobStatus:
    target = min(desired(job, s), s.grant)
    if target < job.min_replicas:
        return _move(s, Phase.PENDING, "WaitingForCapacity", f"restart {s.restarts} waits for a "
                     f"grant of minReplicas={job.min_replicas} (have {s.grant})", now, cause)
    return _move(s, Phase.SCHEDULING, "WaitingForGang", f"restart {s.restarts}: asking for a gang "
                 f"of {target} workers", now, cause, target=target)


def _surplus(s: JobStatus, target: int) -> frozenset[str]:
    """Which workers to stop to get down to ``target``: those outside the world first, then
    the highest names (deterministic)."""
    extra = len(s.alive) - target
    if extra <= 0:
        return frozenset()
    order = sorted(s.alive - s.world, reverse=True) + sorted(s.world, reverse=True)
    return frozenset(order[:extra])


def _retarget_to(s: JobStatus, target: int, phase: Phase, reason: str, message: str, now: float,
                 cause: str, *, reenter: bool = False) -> JobStatus:
    cut = _surplus(s, target)
    return _move(s, phase, reason, message, now, cause, reenter=reenter, target=target,
                 stopping=s.stopping | cut, world=s.world - cut)


def _retarget(job: TrainingJob, s: JobStatus, before: JobStatus, now: float, cause: str,
              never_fits: str = "") -> JobStatus:
    """React to a new grant or wish (``s`` already holds it; ``before`` is the input status).

    A gang scaled down to minReplicas after its timeout stays capped there until it runs:
    raising it again at the next grant would retry the same size forever. A pending job that
    even the idle cluster cannot hold says so (Unschedulable, as a pod the scheduler cannot
    place stays Pending with its reason) and waits, in case the cluster grows, until its
    timeout."""
    target = min(desired(job, s), s.grant)
    if s.phase is Phase.SCHEDULING and s.reason == "ScaledDownToMin":
        target = min(target, job.min_replicas)
    if s.phase in (Phase.RUNNING, Phase.RESCALING) and now < s.grow_after:
        target = min(target, max(len(s.alive), job.min_replicas))  # a refusal's back-off
    if s.phase is Phase.PENDING:
        if target < job.min_replicas:
            if never_fits:
                return _update(before, cause, grant=s.grant, wish=s.wish, reason="Unschedulable",
                               message=never_fits)
            if before.reason == "Unschedulable":  # a card that fits joined: waiting as usual
                return _update(before, cause, grant=s.grant, wish=s.wish, reason="WaitingForCapacity",
                               message=submitted(now).message)
            return _update(before, cause, grant=s.grant, wish=s.wish)
        return _move(s, Phase.SCHEDULING, "WaitingForGang", f"granted {s.grant} workers: asking for "
                     f"a gang of {target}", now, cause, target=target)
    if s.phase in (Phase.RECOVERING, Phase.DELETING) or s.completing:
        return _update(before, cause, grant=s.grant, wish=s.wish)
    if target < job.min_replicas:
        # Pending for good reason: the same words a pending job gets, so a redelivered
        # grant finds nothing to change.
        reason, message = ("Unschedulable", never_fits) if never_fits else (
            "Preempted", f"the grant fell to {s.grant}, below minReplicas={job.min_replicas}: "
            "workers stopped until capacity returns")
        return _move(s, Phase.PENDING, reason, message, now, cause, stopping=s.placed,
                     world=frozenset(), target=0)
    if s.phase is Phase.RUNNING and job.elastic and target != len(s.alive):
        up = target > len(s.alive)
        return _retarget_to(s, target, Phase.RESCALING, "ScalingUp" if up else "ScalingDown",
                            f"world size {len(s.alive)} → {target}", now, cause)
    if s.phase is Phase.RUNNING or target == s.target:
        return _update(before, cause, grant=s.grant, wish=s.wish)
    cut = _surplus(s, target)
    return _update(before, cause, grant=s.grant, wish=s.wish, target=target,
                   stopping=s.stopping | cut, world=s.world - cut)


def _placed(job: TrainingJob, s: JobStatus, workers: frozenset[str], now: float) -> JobStatus:
    new = sorted(workers - s.placed - s.ended)
    if not new:
        return s
    room = s.target - len(s.alive) if s.phase in _GROWING and not s.completing else 0
    take, extra = frozenset(new[:max(0, room)]), frozenset(new[max(0, room):])
    grown = replace(s, placed=s.placed | take | extra, stopping=s.stopping | extra)
    if take and s.phase is Phase.RUNNING and not _ready(job, grown):
        return _move(grown, Phase.RESCALING, "ScalingUp", f"{len(take)} workers placed: world "
                     f"size {len(s.alive)} → {len(grown.alive)}", now, "workers-placed")
    return _settle(job, s, grown, now, "workers-placed")


def _exited(job: TrainingJob, s: JobStatus, ev: WorkerExited, now: float) -> JobStatus:
    w = ev.worker
    if w not in s.placed:
        return s  # unknown, or its exit was already counted
    gone = replace(s, placed=s.placed - {w}, started=s.started - {w}, world=s.world - {w},
                   stopping=s.stopping - {w}, ended=s.ended | {w})
    how = f"exit code {ev.code}" if ev.code is not None else "lost"
    what = f"worker {ev.name or w} ended ({how}{': ' + ev.detail if ev.detail else ''})"
    if w in s.stopping:  # asked to stop: expected, not a failure
        if s.phase is Phase.DELETING and not gone.placed:
            return _move(gone, Phase.DELETED, "Deleted", "every worker stopped", now, ev.kind)
        return _update(s, ev.kind, **_diff(s, gone))
    if ev.code == 0 or s.completing:
        done = replace(gone, succeeded=s.succeeded + (ev.code == 0))
        if not done.alive:
            return _move(done, Phase.SUCCEEDED, "Succeeded", f"{done.succeeded} workers finished",
                         now, ev.kind)
        if s.completing:
            return _update(s, ev.kind, **_diff(s, done))
        return _move(done, Phase.RUNNING, "Completing", f"{what}; waiting for the other "
                     f"{len(done.alive)} to finish", now, ev.kind, reenter=True)
    if job.elastic and s.phase in (Phase.RUNNING, Phase.RESCALING) and \
            len(gone.alive) >= job.min_replicas:
        used = s.restarts + 1
        if used <= job.restart.max_restarts:
            return _move(gone, Phase.RESCALING, "WorkerFailed", f"{what}; {len(gone.alive)} "
                         f"survivors meet in a new rendezvous, a replacement is asked for "
                         f"(restart {used} of {job.restart.max_restarts})", now, ev.kind,
                         reenter=True, restarts=used)
    return _restart(job, gone, "WorkerFailed", what, now, ev.kind)


def _ready(job: TrainingJob, s: JobStatus) -> bool:
    m = s.heard
    return bool(s.phase in _GROWING and not s.completing and m and m <= s.alive
                and job.min_replicas <= len(m) <= job.max_replicas)


def _settle(job: TrainingJob, before: JobStatus, after: JobStatus, now: float, cause: str) -> JobStatus:
    """``after`` as the next status, and Running if the newest heard round now takes effect:
    every member a live worker, minReplicas..maxReplicas of them, while the job waits for a
    world (Scheduling, Rescaling) or runs with another one."""
    m = after.heard
    if _ready(job, after):
        return _move(after, Phase.RUNNING, "Training", f"training with {len(m)} workers "
                     f"(rendezvous round {after.heard_round})", now, cause, world=m,
                     started=after.started | m, heard=frozenset())
    if after == before:
        return before
    return replace(after, generation=before.generation + 1, cause=cause)


def _diff(old: JobStatus, new: JobStatus) -> dict[str, object]:
    keys = ("placed", "started", "world", "stopping", "ended", "succeeded")
    return {k: getattr(new, k) for k in keys if getattr(new, k) != getattr(old, k)}
