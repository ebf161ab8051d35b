"""The job state machine, scenario by scenario: the paths a user will see."""

from __future__ import annotations

import pytest

from alnair_elastic_job import TrainingJob, TransitionError
from alnair_elastic_job._job_spec import Launcher, RestartPolicy, WorkerRequest
from alnair_elastic_job._job_states import (
    TABLE,
    CapacityChanged,
    DeleteCommand,
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
    submitted,
    timeout_seconds,
)
from alnair_elastic_job._job_transitions import step


def job(lo: int = 2, hi: int = 4, restarts: int = 3, launcher: Launcher = Launcher.TORCH_ELASTIC,
        **kw: object) -> TrainingJob:
    return TrainingJob("j", ("python", "t.py"), lo, hi, WorkerRequest(8, 30), launcher=launcher,
                       restart=RestartPolicy(restarts, 5.0, 20.0), **kw)  # type: ignore[arg-type]


class Run:
    """Feeds inputs at advancing times and keeps every status, as the controller would."""

    def __init__(self, j: TrainingJob) -> None:
        self.job, self.now = j, 0.0
        self.s = submitted(0.0)
        self.history: list[JobStatus] = [self.s]

    def __call__(self, event: object, dt: float = 1.0) -> JobStatus:
        self.now += dt
        new = step(self.job, self.s, event, self.now)  # type: ignore[arg-type]
        if new is not self.s:
            assert new.generation == self.s.generation + 1
            self.history.append(new)
        self.s = new
        return new

    def running(self, *workers: str) -> JobStatus:
        self(CapacityChanged(len(workers)))
        self(WorkersPlaced(frozenset(workers)))
        for w in workers:
            self(WorkerStarted(w))
        return self(RendezvousComplete(frozenset(workers), self.s.heard_round + 1))

    @property
    def path(self) -> list[str]:
        return [f"{s.phase.value}/{s.reason}" for s in self.history]


def test_a_killed_worker_shrinks_the_job_then_a_replacement_grows_it_back() -> None:
    """The issue's scenario: Running(3) → kill -9 → Rescaling → Running(2) → Running(3)."""
    r = Run(job(2, 3))
    assert r.running("a", "b", "c").phase is Phase.RUNNING and r.s.world_size == 3
    s = r(WorkerExited("b", -9, "SIGKILL"))
    assert (s.phase, s.reason, s.restarts, s.world) == (Phase.RESCALING, "WorkerFailed", 1,
                                                        frozenset("ac"))
    assert "SIGKILL" in s.message and s.target == 3
    assert r(RendezvousComplete(frozenset("ac"), r.s.heard_round + 1)).world_size == 2 and r.s.phase is Phase.RUNNING
    assert r(WorkersPlaced(frozenset("d"))).phase is Phase.RESCALING and r.s.reason == "ScalingUp"
    r(WorkerStarted("d"))
    s = r(RendezvousComplete(frozenset("acd"), r.s.heard_round + 1))
    assert s.phase is Phase.RUNNING and s.world_size == 3 and s.restarts == 1
    assert r.path[-6:] == ["Running/Training", "Rescaling/WorkerFailed", "Running/Training",
                           "Rescaling/ScalingUp", "Rescaling/ScalingUp", "Running/Training"]


def test_the_same_exit_reported_twice_uses_one_restart() -> None:
    r = Run(job(2, 3))
    r.running("a", "b", "c")
    once = r(WorkerExited("b", 1))
    assert r(WorkerExited("b", 1)) is once and once.restarts == 1
    assert r(WorkersPlaced(frozenset("b"))) is once, "an ended worker cannot be placed again"


def test_a_worker_made_for_an_earlier_gang_is_no_member_of_the_next() -> None:
    """The CI failure of test_ej_local_torch: the rendezvous host died, the job restarted as a
    new gang, and only then did the adapter carry out the old gang's late plan (a replacement
    worker). Its placement was counted for the new gang, and its exit — the adapter stops such
    a worker — as the new gang's failure, restart after restart until none were left."""
    r = Run(job(2, 3, restarts=4))
    r.running("a", "b", "c")
    old = rendezvous_id(r.job, r.s)
    r(WorkerExited("a", 1))  # the host is gone: the first exit rescales (a replacement asked) ...
    s = r(WorkerExited("b", 1))  # ... the second leaves too few: a new gang
    assert s.phase is Phase.RECOVERING
    r(WorkerExited("c", 143))
    s = r(Tick(), dt=10.0)
    assert s.phase is Phase.SCHEDULING and (restarts := s.restarts) == 2 and rendezvous_id(r.job, s) != old
    assert r(WorkersPlaced(frozenset("x"), old)) is s, "the old gang's late replacement"
    assert r(WorkerExited("x", 143)) is s, "...stopped by its adapter: not this gang's failure"
    new = rendezvous_id(r.job, s)
    r(WorkersPlaced(frozenset("def"), new))
    for w in "def":
        r(WorkerStarted(w))
    s = r(RendezvousComplete(frozenset("def"), r.s.heard_round + 1, new))
    assert s.phase is Phase.RUNNING and s.world == frozenset("def") and s.restarts == restarts


def test_failures_beyond_the_restart_policy_end_in_failed_with_the_reason() -> None:
    r = Run(job(2, 4, restarts=1))
    r.running("a", "b", "c", "d")
    assert r(WorkerExited("a", 137)).phase is Phase.RESCALING
    s = r(WorkerExited("b", 1, "CUDA error", name="train-worker-1"))
    assert (s.phase, s.reason, s.restarts) == (Phase.FAILED, "RestartsExhausted", 2)
    assert "maxRestarts=1" in s.message and "CUDA error" in s.message
    assert "worker train-worker-1 ended (exit code 1: CUDA error)" in s.message, "named as ps shows it"
    assert s.stopping == s.placed == frozenset("cd"), "the survivors are stopped"
    assert r(WorkerExited("c", 0)) is s, "terminal states are absorbing"


def test_a_fixed_size_job_restarts_every_worker_after_its_back_off() -> None:
    r = Run(job(2, 2, launcher=Launcher.TORCH))
    r.running("a", "b")
    s = r(WorkerExited("a", 1))
    assert (s.phase, s.stopping, s.retry_at) == (Phase.RECOVERING, frozenset("b"), r.now + 5.0)
    assert timeout_seconds(r.job, s) == 5.0
    assert r(Tick(), dt=4.0) is s
    s = r(Tick(), dt=1.0)
    assert (s.phase, s.reason, s.target) == (Phase.SCHEDULING, "WaitingForGang", 2)
    s = r(WorkerExited("b", 143))  # the stopped survivor: expected, not a failure
    assert s.restarts == 1 and s.phase is Phase.SCHEDULING
    r(WorkersPlaced(frozenset("cd")))
    assert r(RendezvousComplete(frozenset("cd"), r.s.heard_round + 1)).phase is Phase.RUNNING
    with pytest.raises(TransitionError, match="fixed world size"):
        r(ScaleCommand(3))


def test_capacity_taken_shrinks_stopping_workers_that_are_not_failures() -> None:
    r = Run(job(2, 4))
    r.running("a", "b", "c", "d")
    s = r(CapacityChanged(2))
    assert (s.phase, s.reason, s.stopping, s.world) == (Phase.RESCALING, "ScalingDown",
                                                        frozenset("cd"), frozenset("ab"))
    r(WorkerExited("d", 143))
    r(WorkerExited("c", None, "pod deleted"))
    s = r(RendezvousComplete(frozenset("ab"), r.s.heard_round + 1))
    assert (s.phase, s.world_size, s.restarts) == (Phase.RUNNING, 2, 0)
    s = r(CapacityChanged(1))
    assert (s.phase, s.reason, s.stopping) == (Phase.PENDING, "Preempted", frozenset("ab"))


def test_a_gang_that_does_not_meet_is_retried_at_min_then_fails() -> None:
    r = Run(job(2, 4))
    r(CapacityChanged(4))
    r(WorkersPlaced(frozenset("abcd")))
    s = r(Tick(), dt=600.0)
    assert (s.phase, s.reason, s.target, s.stopping) == (Phase.SCHEDULING, "ScaledDownToMin", 2,
                                                         frozenset("cd"))
    assert r(CapacityChanged(4)).target == 2, "the next grant does not undo the scale-down"
    s = r(Tick(), dt=600.0)
    assert (s.phase, s.reason) == (Phase.FAILED, "SchedulingTimeout")
    assert "schedulingTimeoutSeconds" in s.message


def test_a_gang_the_scheduler_can_never_place_fails_at_once_with_its_reason() -> None:
    r = Run(job(2, 4))
    r(CapacityChanged(4))
    r(WorkersPlaced(frozenset("ab")))
    s = r(WorkerRefused("c", "request-exceeds-card", "no card has 200 GiB: the largest has 80",
                        "default.j.1"))
    assert (s.phase, s.reason, s.cause, s.stopping) == (Phase.FAILED, "Unschedulable", "worker-refused",
                                                        frozenset("ab"))
    assert "no card has 200 GiB" in s.message and "spec.worker" in s.message


def test_refusals_that_cannot_end_the_gang_change_nothing() -> None:
    r = Run(job(2, 4))
    r(CapacityChanged(4))
    before = r(WorkersPlaced(frozenset("ab")))
    assert r(WorkerRefused("c", "gang-timeout", "PodGroup timed out")) is before, \
        "the controller's own scheduling timeout (and retry at min) decides the gang"
    assert r(WorkerRefused("c", "bind-failed", "3 attempts", "default.j.0")) is before, \
        "a worker of an earlier gang"
    r.running("a", "b", "c", "d")
    running = r(CapacityChanged(4))
    assert r(WorkerRefused("e", "request-exceeds-card", "too big")) is running, \
        "a running job goes on with its world"


@pytest.mark.parametrize("bound", [False, True])
def test_a_refused_replacement_is_dropped_and_the_job_finishes_without_it(bound: bool) -> None:
    r = Run(job(2, 3))
    r.running("a", "b", "c")
    r(WorkerExited("c", 1))
    if bound:  # the replacement was bound, then its start failed for good
        r(WorkersPlaced(frozenset("d")))
    s = r(WorkerRefused("d", "bind-failed", "binding failed 3 times"))
    assert (s.phase, s.target, s.alive, s.restarts) == (Phase.RESCALING, 2, frozenset("ab"), 1)
    assert "refused worker d (bind-failed: binding failed 3 times)" in s.message
    assert r(RendezvousComplete(frozenset("ab"), r.s.heard_round + 1)).world == frozenset("ab")
    r(WorkerExited("a", 0))
    s = r(WorkerExited("b", 0))
    assert (s.phase, s.succeeded) == (Phase.SUCCEEDED, 2), "it waited for the refused worker"
    assert r(WorkerExited("d", None)) is s, "a late report of the refused worker changes nothing"


def test_a_refused_worker_to_grow_by_leaves_the_world_training() -> None:
    r = Run(job(2, 3))
    r.running("a", "b")
    assert (r(CapacityChanged(3)).phase, r.s.reason, r.s.target) == (Phase.RESCALING, "ScalingUp", 3)
    s = r(WorkerRefused("c", "request-exceeds-card", "no card has room"))  # never bound
    assert (s.phase, s.reason, s.world, s.target, s.restarts) == (Phase.RUNNING, "Training",
                                                                   frozenset("ab"), 2, 0)
    assert "going on with 2 workers" in s.message
    assert r(WorkerRefused("c", "request-exceeds-card", "again")) is s, "a repeated refusal"
    assert r(WorkerRefused("x", "bind-failed", "stray")) is s, "nothing is asked for"


def test_a_refused_newcomer_is_asked_for_again_after_a_doubling_back_off() -> None:
    r = Run(job(2, 3))  # restart back-off 5 s, at most 20 s
    r.running("a", "b")
    r(CapacityChanged(3))
    s = r(WorkerRefused("c", "request-exceeds-card", "no card has room"))
    assert (s.refusals, s.grow_after) == (1, r.now + 5.0)
    assert "asking for more in 5 s (refusal 1 in a row)" in s.message
    assert r(CapacityChanged(3), dt=4.0) is s, "each reallocation within the back-off asks nothing"
    s = r(CapacityChanged(3), dt=1.5)
    assert (s.phase, s.reason, s.target) == (Phase.RESCALING, "ScalingUp", 3), "asked again after 5 s"
    s = r(WorkerRefused("d", "request-exceeds-card", "still no room"))
    assert (s.target, s.refusals, s.grow_after) == (2, 2, r.now + 10.0), "doubled"
    assert r(CapacityChanged(3), dt=9.0).target == 2
    assert r(CapacityChanged(3), dt=1.5).target == 3
    r(WorkersPlaced(frozenset("e")))
    s = r(WorkerStarted("e"))
    assert s.refusals == 0, "a newcomer that started ends the run of refusals"
    assert r(WorkerRefused("x", "bind-failed", "stray")).refusals == 0


def test_a_scale_command_lifts_a_refusals_back_off() -> None:
    r = Run(job(2, 4))
    r.running("a", "b")
    r(CapacityChanged(4))
    s = r(WorkerRefused("c", "request-exceeds-card", "no room"))
    assert (s.target, s.phase) == (2, Phase.RUNNING) and s.grow_after > r.now
    s = r(ScaleCommand(4))
    assert (s.target, s.refusals, s.grow_after) == (4, 0, 0.0), "the user's scale asks at once"


def test_a_refusal_that_leaves_fewer_than_min_restarts_the_job() -> None:
    r = Run(job(2, 3))
    r.running("a", "b")
    r(CapacityChanged(3))
    r(WorkersPlaced(frozenset("c")))
    r(WorkerExited("a", 1))  # b and the newcomer c are to meet
    s = r(WorkerRefused("c", "bind-failed", "node gone"))
    assert (s.phase, s.reason, s.restarts, s.stopping) == (Phase.RECOVERING, "WorkerRefused", 2,
                                                           frozenset("b"))


def test_scale_commands_move_within_min_and_max_only() -> None:
    r = Run(job(2, 4))
    r.running("a", "b", "c", "d")
    with pytest.raises(TransitionError, match=r"2\.\.4 workers"):
        r(ScaleCommand(5))
    s = r(ScaleCommand(3))
    assert (s.phase, s.reason, s.target, s.stopping) == (Phase.RESCALING, "ScalingDown", 3,
                                                         frozenset("d"))
    r(WorkerExited("d", 0))  # a stopped worker's exit code does not make it a success
    assert r(RendezvousComplete(frozenset("abc"), r.s.heard_round + 1)).phase is Phase.RUNNING and r.s.succeeded == 0
    assert r(CapacityChanged(8)).target == 3, "the wish caps the grant"


def test_an_exit_zero_completes_the_job_once_the_others_end() -> None:
    r = Run(job(2, 3))
    r.running("a", "b", "c")
    s = r(WorkerExited("a", 0))
    assert (s.phase, s.reason, s.completing) == (Phase.RUNNING, "Completing", True)
    assert timeout_seconds(r.job, s) == 60.0
    r(WorkerExited("b", 1, "teardown"))
    s = r(WorkerExited("c", 0))
    assert (s.phase, s.reason, s.succeeded) == (Phase.SUCCEEDED, "Succeeded", 2)


def test_stragglers_after_completion_are_stopped_and_the_job_succeeds() -> None:
    r = Run(job(2, 3))
    r.running("a", "b", "c")
    r(WorkerExited("a", 0))
    s = r(Tick(), dt=61.0)
    assert s.phase is Phase.SUCCEEDED and s.stopping == frozenset("bc") and "2 still running" in s.message


def test_delete_stops_every_worker_then_the_job_is_deleted() -> None:
    r = Run(job(2, 3))
    r.running("a", "b")
    s = r(DeleteCommand())
    assert (s.phase, s.stopping) == (Phase.DELETING, frozenset("ab"))
    assert r(DeleteCommand()) is s
    r(WorkerExited("a", 143))
    assert r(WorkerExited("b", 143)).phase is Phase.DELETED
    assert step(r.job, submitted(0.0), DeleteCommand(), 1.0).phase is Phase.DELETED


def test_the_active_deadline_fails_the_job_in_any_phase() -> None:
    from alnair_elastic_job._job_spec import Deadlines
    r = Run(job(2, 3, deadlines=Deadlines(600, 60, 100)))
    r.running("a", "b")
    s = r(Tick(), dt=100.0)
    assert (s.phase, s.reason) == (Phase.FAILED, "DeadlineExceeded")


def test_pending_without_capacity_times_out() -> None:
    r = Run(job(2, 3))
    assert r(CapacityChanged(1)).phase is Phase.PENDING and r.s.grant == 1
    s = r(Tick(), dt=600.0)
    assert (s.phase, s.reason) == (Phase.FAILED, "PendingTimeout")


def test_a_job_the_idle_cluster_cannot_hold_waits_saying_why_until_its_timeout() -> None:
    r = Run(job(2, 3))
    why = "minReplicas=2 workers, each of 8 GiB and 30 % of one card, do not fit this cluster"
    s = r(CapacityChanged(0, why))
    assert (s.phase, s.reason, s.message, s.cause) == (Phase.PENDING, "Unschedulable", why, "capacity")
    assert r(CapacityChanged(0, why)) is s, "said once, not on every tick"
    s = r(CapacityChanged(0))
    assert (s.phase, s.reason) == (Phase.PENDING, "WaitingForCapacity"), "a card that fits joined"
    r(CapacityChanged(0, why))
    s = r(Tick(), dt=600.0)
    assert (s.phase, s.reason) == (Phase.FAILED, "PendingTimeout") and why in s.message


def test_the_table_covers_every_phase_and_every_non_terminal_one_is_bounded() -> None:
    assert set(TABLE) == set(Phase)
    for phase, info in TABLE.items():
        assert info.meaning
        if not phase.terminal:
            assert info.leaves_on and info.timeout, phase


def test_a_round_heard_before_its_members_were_placed_takes_effect_once_they_are() -> None:
    """Rounds and worker lifecycle travel on different streams: either may come first."""
    r = Run(job(2, 3))
    r(CapacityChanged(3))
    s = r(RendezvousComplete(frozenset("ab"), 1))
    assert s.phase is Phase.SCHEDULING and s.heard == frozenset("ab")
    assert r(WorkersPlaced(frozenset("a"))).phase is Phase.SCHEDULING
    s = r(WorkersPlaced(frozenset("b")))
    assert (s.phase, s.world, s.heard) == (Phase.RUNNING, frozenset("ab"), frozenset())
    assert r(RendezvousComplete(frozenset("a"), 1)) is s, "an old round is ignored"
    r(WorkersPlaced(frozenset("c")))
    assert r.s.phase is Phase.RESCALING and r.s.reason == "ScalingUp"
    assert r(RendezvousComplete(frozenset("abc"), 2)).world_size == 3


def test_goodput_is_the_share_of_time_since_the_first_run_spent_running() -> None:
    r = Run(job(2, 3))
    r(CapacityChanged(3), dt=0.0)
    r(WorkersPlaced(frozenset("abc")), dt=0.0)
    s = r(RendezvousComplete(frozenset("abc"), 1), dt=50.0)  # first runs at t=50
    assert s.first_run_at == 50.0 and s.goodput(50.0) == 0.0 and s.goodput(150.0) == 1.0
    r(WorkerExited("b", 1), dt=100.0)                       # t=150: 100 s of training
    s = r(RendezvousComplete(frozenset("ac"), 2), dt=20.0)  # t=170: 20 s lost
    assert s.running_seconds == 100.0
    assert s.goodput(250.0) == pytest.approx((100.0 + 80.0) / 200.0)
    assert submitted(0.0).goodput(10.0) == 0.0


def test_a_job_that_reports_steps_and_stops_stepping_is_restarted_not_left_hanging() -> None:
    """No silent hang: survivors blocked in a collective report no step; after twice the
    slowest recent step the job is Recovering, long before NCCL's or gloo's timeouts."""
    r = Run(job(2, 3))
    r.running("a", "b", "c")
    assert timeout_seconds(r.job, r.s) is None, "no step reports yet: no stall clock"
    r(StepReported(1, 4.0), dt=30.0)              # the first step after restoring a checkpoint
    s = r(StepReported(2, 4.0), dt=4.0)
    assert r(StepReported(2, 4.0), dt=0.0) is s and r(StepReported(1, 9.0), dt=0.0) is s, \
        "only newer steps count"
    assert timeout_seconds(r.job, s) == pytest.approx(s.last_step_at + 10.0 - s.entered_at)
    assert r(Tick(), dt=9.0).phase is Phase.RUNNING
    s = r(Tick(), dt=2.0)
    assert (s.phase, s.reason, s.restarts) == (Phase.RECOVERING, "Stalled", 1)
    assert "no training step for 11 s since step 2" in s.message
    assert s.stopping == frozenset("abc")


def test_a_new_world_gets_the_rendezvous_timeout_for_its_first_step() -> None:
    r = Run(job(2, 3))
    r.running("a", "b", "c")
    r(StepReported(5, 20.0))
    s = r(WorkerExited("c", 1))
    s = r(RendezvousComplete(frozenset("ab"), r.s.heard_round + 1))
    assert s.last_step_at is None and s.slowest_step == 20.0
    assert timeout_seconds(r.job, s) == 60.0 + 40.0
    assert r(StepReported(6, 25.0), dt=50.0).phase is Phase.RUNNING
