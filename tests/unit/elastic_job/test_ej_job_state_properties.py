"""Properties of the job state machine over any order of inputs (hypothesis).

Inputs come from a small universe of worker names so that duplicates, late reports and
reports about workers the job never had are common, as they are on a redelivering bus.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from alnair_elastic_job import TrainingJob, TransitionError
from alnair_elastic_job._job_spec import Deadlines, Launcher, RestartPolicy, WorkerRequest
from alnair_elastic_job._job_states import (
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
    submitted,
    timeout_seconds,
)
from alnair_elastic_job._job_transitions import step

NAMES = [f"w{i}" for i in range(7)]
name = st.sampled_from(NAMES)
names = st.frozensets(name, max_size=5)



class OfAlive:
    """A placeholder resolved against the status when applied, so that sequences reach
    Running, Rescaling and Recovering often: a rendezvous of the first ``k`` alive workers,
    the exit of alive worker ``i``, or ``i + 1`` workers never seen before placed."""

    def __init__(self, what: str, i: int, code: int | None = None) -> None:
        self.what, self.i, self.code = what, i, code

    def resolve(self, s: JobStatus) -> object:
        alive = sorted(s.alive)
        if self.what == "rendezvous":
            return RendezvousComplete(frozenset(alive[:self.i] if self.i else alive), s.heard_round + 1)
        if self.what == "place":
            fresh = [f"f{n}" for n in range(64) if f"f{n}" not in s.placed | s.ended]
            return WorkersPlaced(frozenset(fresh[:self.i + 1]))
        return WorkerExited(alive[self.i % len(alive)] if alive else "w0", self.code)


codes = st.sampled_from([0, 1, 137, -9, None])
smart = st.one_of(st.builds(OfAlive, st.just("rendezvous"), st.integers(0, 4)),
                  st.builds(OfAlive, st.just("place"), st.integers(0, 3)),
                  st.builds(OfAlive, st.just("exit"), st.integers(0, 4), codes))
inputs = st.one_of(
    smart, smart, smart,
    st.builds(CapacityChanged, st.integers(0, 6)),
    st.builds(CapacityChanged, st.integers(0, 6), st.sampled_from(["", "does not fit this cluster"])),
    st.builds(WorkersPlaced, names),
    st.builds(WorkersPlaced, names),
    st.builds(WorkersPlaced, names),
    st.builds(WorkerStarted, name),
    st.builds(WorkerExited, name, codes),
    st.builds(WorkerRefused, name, st.sampled_from(["request-exceeds-card", "gang-timeout", ""]),
              st.just("no card has 200 GiB"), st.sampled_from(["", "default.j.1", "default.j.9"])),
    st.builds(RendezvousComplete, names, st.integers(1, 30)),
    st.builds(ScaleCommand, st.integers(0, 6)),
    st.builds(ScaleCommand, st.integers(1, 4)),
    st.builds(StepReported, st.integers(0, 30), st.sampled_from([0.0, 0.5, 3.0, 40.0])),
    st.just(Tick()),
    st.just(Tick()),
    st.just(DeleteCommand()),
)
jobs = st.builds(
    lambda lo, extra, restarts, fixed, backoff, deadline: TrainingJob(
        "j", ("python", "t.py"), lo, lo if fixed else lo + extra, WorkerRequest(8, 30),
        launcher=Launcher.TORCH if fixed else Launcher.TORCH_ELASTIC,
        restart=RestartPolicy(restarts, backoff, max(backoff, 20.0)),
        deadlines=Deadlines(300.0, 60.0, deadline)),
    st.integers(1, 3), st.integers(0, 3), st.integers(0, 3), st.booleans(),
    st.sampled_from([0.0, 5.0]), st.sampled_from([0.0, 2000.0]))
# Half the sequences start from a running job of 1..4 workers: the random rest then explores
# Running, Rescaling and Recovering instead of mostly Pending.
_START = [(0.0, CapacityChanged(4)), (0.0, WorkersPlaced(frozenset(NAMES[:4]))),
          (0.0, OfAlive("rendezvous", 0))]
timed = st.tuples(st.booleans(), st.lists(st.tuples(
    st.sampled_from([0.0, 0.0, 1.0, 1.0, 1.0, 5.0, 30.0, 400.0]), inputs), max_size=40)).map(
        lambda t: (_START if t[0] else []) + t[1])


def run(j: TrainingJob, events: list) -> list[tuple[JobStatus, object, JobStatus, float]]:
    """Every (before, input, after, now) of one sequence; refused commands change nothing."""
    s, now, steps = submitted(0.0), 0.0, []
    for dt, event in events:
        now += dt
        if isinstance(event, OfAlive):
            event = event.resolve(s)
        try:
            new = step(j, s, event, now)
        except TransitionError:
            assert isinstance(event, ScaleCommand)
            new = s
        steps.append((s, event, new, now))
        s = new
    return steps


def invariants(j: TrainingJob, s: JobStatus) -> None:
    assert s.world <= s.started <= s.placed, "each worker is counted in one place"
    assert s.stopping <= s.placed and not s.placed & s.ended
    assert s.world.isdisjoint(s.stopping)
    assert s.world_size <= j.max_replicas and len(s.alive) <= j.max_replicas
    if s.phase is Phase.RUNNING and not s.completing:
        assert j.min_replicas <= s.world_size, "Running never below minReplicas"
    if not s.phase.terminal:
        assert len(s.alive) <= s.target or s.completing
    else:
        assert not s.alive, "a finished job keeps no worker it does not stop"
    if s.restarts > j.restart.max_restarts:
        assert (s.phase, s.reason) == (Phase.FAILED, "RestartsExhausted")


@settings(max_examples=400, deadline=None)
@given(jobs, timed)
def test_invariants_hold_after_every_input(j: TrainingJob, events: list) -> None:
    for before, event, after, now in run(j, events):
        invariants(j, after)
        assert 0.0 <= after.goodput(now) <= 1.0
        if after.first_run_at is None:
            assert after.running_seconds == 0.0
        else:
            assert after.running_seconds <= now - after.first_run_at + 1e-9
        if after is not before:
            assert after.generation == before.generation + 1 and after.cause == event.kind
        assert after.restarts - before.restarts in (0, 1)


@settings(max_examples=300, deadline=None)
@given(jobs, timed)
def test_terminal_states_are_absorbing(j: TrainingJob, events: list) -> None:
    for before, _, after, _ in run(j, events):
        if before.phase.terminal:
            assert after is before


@settings(max_examples=300, deadline=None)
@given(jobs, timed, inputs)
def test_a_repeated_report_changes_nothing(j: TrainingJob, events: list, event: object) -> None:
    """A redelivered message (anything but the clock) is applied once."""
    steps = run(j, events)
    s, now = (steps[-1][2], steps[-1][3]) if steps else (submitted(0.0), 0.0)
    if isinstance(event, Tick):
        return
    if isinstance(event, OfAlive):
        event = event.resolve(s)
    try:
        once = step(j, s, event, now)  # type: ignore[arg-type]
    except TransitionError:
        return
    assert step(j, once, event, now) is once  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(jobs, timed)
def test_no_input_order_leaves_a_job_stuck(j: TrainingJob, events: list) -> None:
    """Every non-terminal phase has a timeout, except Running, which a worker exit, a loss of
    capacity or a delete leaves; the clock alone brings any job to Running or an end within
    a bound, and a delete plus the clock always ends it."""
    steps = run(j, events)
    s, now = (steps[-1][2], steps[-1][3]) if steps else (submitted(0.0), 0.0)
    if not s.phase.terminal and not (s.phase is Phase.RUNNING and not s.completing):
        assert timeout_seconds(j, s) is not None, s.phase
    if s.phase is Phase.RUNNING and not s.completing:
        assert step(j, s, WorkerExited(sorted(s.world)[0], 1), now).phase is not Phase.RUNNING
        assert step(j, s, CapacityChanged(0), now + 1).phase is Phase.PENDING
    for grant in (None, 0, j.min_replicas, j.max_replicas):  # the clock alone, and with capacity
        clocked = s
        for k in range(2 * j.restart.max_restarts + 6):
            if grant is not None:
                clocked = step(j, clocked, CapacityChanged(grant), now + 1e6 * k + 1)
            clocked = step(j, clocked, Tick(), now + 1e6 * (k + 1))
        assert clocked.phase.terminal or clocked.phase is Phase.RUNNING and not clocked.completing, \
            (grant, clocked.phase, clocked.reason)
    deleted = step(j, s, DeleteCommand(), now)
    assert step(j, deleted, Tick(), now + 1e6).phase.terminal


@settings(max_examples=200, deadline=None)
@given(jobs, st.lists(name, min_size=1, max_size=12))
def test_failures_beyond_the_policy_end_in_failed(j: TrainingJob, victims: list[str]) -> None:
    """Keep the job running and fail workers: the one past maxRestarts ends it, with why."""
    s, now, failures = submitted(0.0), 0.0, 0
    fresh = iter(f"n{i}" for i in range(10_000))
    for victim in victims:
        if s.phase.terminal:
            break
        for _ in range(4 * j.restart.max_restarts + 8):  # until it runs again
            s = step(j, s, CapacityChanged(j.max_replicas), now)
            new = frozenset(next(fresh) for _ in range(j.max_replicas))
            s = step(j, s, WorkersPlaced(new), now)
            s = step(j, s, RendezvousComplete(s.alive, s.heard_round + 1), now)
            if s.phase is Phase.RUNNING:
                break
            now += 100.0  # past any back-off (<= 20 s), within the scheduling timeout (300 s)
            s = step(j, s, Tick(), now)
        assert s.phase is Phase.RUNNING
        target = sorted(s.world)[hash(victim) % len(s.world)]
        s = step(j, s, WorkerExited(target, 1, "boom"), now)
        failures += 1
        assert s.restarts == failures
    if failures > j.restart.max_restarts:
        assert (s.phase, s.reason) == (Phase.FAILED, "RestartsExhausted")
        assert f"maxRestarts={j.restart.max_restarts}" in s.message
    else:
        assert not s.phase.terminal


@settings(max_examples=200, deadline=None)
@given(jobs, timed)
def test_every_status_survives_the_record_a_restarted_controller_reads(j: TrainingJob, events: list) -> None:
    from alnair.v1 import job_pb2
    from alnair_elastic_job import TrackedJob
    from alnair_elastic_job._job_record import record_from_proto, record_to_proto
    for _, _, after, now in run(j, events):
        wire = record_to_proto(TrackedJob(j, after), now).SerializeToString()
        back = record_from_proto(job_pb2.TrainingJobRecord.FromString(wire))
        assert back.job == j and back.status == after


@settings(max_examples=300, deadline=None)
@given(jobs, timed)
def test_the_table_says_truly_which_inputs_leave_each_phase(j: TrainingJob, events: list) -> None:
    """The CLI shows TABLE to users: every phase change must be one it lists (a "tick"
    is the phase's timeout, "deadline" the active deadline, whichever input carried it)."""
    from alnair_elastic_job import TABLE
    for before, event, after, _ in run(j, events):
        if after.phase is before.phase:
            continue
        allowed = TABLE[before.phase].leaves_on
        if after.reason == "DeadlineExceeded":
            assert "deadline" in allowed
        elif event.kind == "tick":
            assert TABLE[before.phase].timeout != "none"
        else:
            assert event.kind in allowed, (before.phase, event.kind, after.phase)
