"""The one rule both adapters follow for a training job's WorkerPlan, and the rendezvous
host's reading of torch's rendezvous state (real torch classes; a forged state refused)."""

from __future__ import annotations

import base64
import pickle
import subprocess
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

from alnair.v1 import job_pb2
from alnair_lifecycle import JOB_LABEL, plan_changes, worker_command, worker_env, worker_labels
from alnair_lifecycle.rendezvous_host import closed_round, evicted

UIDS = st.sets(st.sampled_from([f"w{i}" for i in range(8)]))


def plan(target: int, stop: set[str] = frozenset(), launcher: int = job_pb2.LAUNCHER_TORCH_ELASTIC,
         restarts: int = 3) -> job_pb2.WorkerPlan:
    spec = job_pb2.JobSpec(name="resnet", namespace="ml", min_replicas=2, max_replicas=4, launcher=launcher,
                           command=["python", "train.py", "--lr", "0.1"],
                           restart_policy=job_pb2.RestartPolicy(max_restarts=restarts),
                           deadlines=job_pb2.JobDeadlines(rendezvous_timeout_seconds=45))
    return job_pb2.WorkerPlan(spec=spec, generation=3, target=target, stop=sorted(stop),
                              rendezvous_id="ml.resnet.2")


@given(live=UIDS, stop=UIDS, pending=UIDS, target=st.integers(0, 8))
def test_a_plan_applied_to_what_it_leaves_asks_for_nothing_more(live: set[str], stop: set[str], pending: set[str],
                                                                target: int) -> None:
    p = plan(target, stop)
    pending = pending & live
    first = plan_changes(p, live, pending)
    named = live & stop
    assert named <= set(first.stop)
    assert set(first.stop) - named <= pending  # only unplaced workers are withdrawn unnamed
    after = (live - set(first.stop)) | {f"new{i}" for i in range(first.create)}
    again = plan_changes(p, after, (pending - set(first.stop)) | {f"new{i}" for i in range(first.create)})
    assert again.stop == () and again.create == 0
    placed_left = len(live - stop - pending)
    assert len(after) == max(target, placed_left)  # down to the target, unless placed ones exceed it


def test_a_worker_of_an_earlier_gang_is_stopped_and_not_counted() -> None:
    """A pending worker made for gang 1 just before its host died, which the controller never
    heard of, takes no place in gang 2 (it would die on gang 1's endpoint, leaving gang 2 one
    short for good); an unlabelled worker counts as this gang's."""
    p = plan(3)  # gang ml.resnet.2
    gangs = {"old": "ml.resnet.1", "a": "ml.resnet.2", "b": "ml.resnet.2", "bare": ""}
    changes = plan_changes(p, gangs, pending={"old"}, gangs=gangs)
    assert changes.stop == ("old",) and changes.create == 0  # a, b and bare make the 3
    assert plan_changes(p, {"old", "a"}, gangs=gangs) == type(changes)(("old",), 2)


def test_a_completing_plan_replaces_no_worker_that_finished_since() -> None:
    # The controller counted two live workers; by the time the plan is applied one finished.
    p = plan(2)
    assert plan_changes(p, {"a"}).create == 1  # an ordinary plan: the missing one is made
    p.completing = True
    assert plan_changes(p, {"a"}).create == 0
    assert plan_changes(p, set()).create == 0
    assert plan_changes(p, {"a", "b"}, pending={"b"}).stop == ()  # the live ones finish by themselves


def test_workers_run_the_command_under_torchrun_meeting_at_the_host() -> None:
    argv = worker_command(plan(3), "127.0.0.1:29400")
    assert argv[0] == "torchrun" and argv[-5:] == ["--no-python", "python", "train.py", "--lr", "0.1"]
    assert "--nnodes=2:4" in argv and "--nproc-per-node=1" in argv and "--rdzv-backend=c10d" in argv
    assert "--rdzv-endpoint=127.0.0.1:29400" in argv and "--rdzv-id=ml.resnet.2" in argv
    conf = next(a for a in argv if a.startswith("--rdzv-conf="))
    assert "is_host=false" in conf and "join_timeout=45" in conf  # never hosts the store itself
    assert "--max-restarts=3" in argv  # survivors of an elastic job re-rendezvous in place


def test_a_fixed_size_job_gets_no_torchrun_restarts() -> None:
    argv = worker_command(plan(2, launcher=job_pb2.LAUNCHER_TORCH), "h:1")
    assert "--nnodes=2" in argv and "--max-restarts=0" in argv


def test_workers_are_labelled_with_their_job_and_gang() -> None:
    labels = worker_labels(plan(1))
    assert labels[JOB_LABEL] == "resnet" and labels["ai.centaurus.io/training-job-namespace"] == "ml"
    assert labels["ai.centaurus.io/rendezvous-id"] == "ml.resnet.2"


def stored(state: object) -> bytes:
    return base64.b64encode(pickle.dumps(state))


def test_a_complete_round_is_read_with_its_members_numbered_from_one() -> None:
    s = _RendezvousState()
    a, b = _NodeDesc("pod-a", 10, 0), _NodeDesc("pod-b", 11, 0)
    s.participants = {a: 0, b: 1}
    s.last_heartbeats = {a: s.deadline, b: s.deadline}
    assert closed_round(stored(s)) is None  # not complete yet
    s.complete, s.round = True, 4
    assert closed_round(stored(s)) == (5, [["pod-a", 10, 0], ["pod-b", 11, 0]])
    assert closed_round(b"Y2FuaW1hZGFt") is None and closed_round(b"") is None


class Forged:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (subprocess.call, (["touch", "/tmp/alnair-forged-rendezvous"],))


def test_a_forged_state_in_the_store_cannot_run_code_in_the_host() -> None:
    with pytest.raises(pickle.UnpicklingError, match="subprocess.call is not part of a rendezvous state"):
        closed_round(stored(Forged()))
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        closed_round(base64.b64encode(b"cos\nsystem\n(S'true'\ntR."))


def test_an_inprocess_worker_is_its_command_with_the_rendezvous_in_its_environment() -> None:
    import alnair_trainer

    p = plan(3, launcher=job_pb2.LAUNCHER_TORCH_INPROCESS)
    assert worker_command(p, "10.0.0.9:29400") == ["python", "train.py", "--lr", "0.1"]
    env = worker_env(p, "10.0.0.9:29400")
    # The names the trainer reads (alnair_trainer has no Alnair dependency: it repeats them).
    assert env[alnair_trainer.ENDPOINT_ENV] == "10.0.0.9:29400"
    assert env[alnair_trainer.ID_ENV] == "ml.resnet.2" and env[alnair_trainer.NODES_ENV] == "2:4"
    conf = env[alnair_trainer.CONF_ENV]
    assert "is_host=false" in conf and "join_timeout=45" in conf and "last_call_timeout=1" in conf
    # torchrun workers get no rendezvous variables (their arguments carry it).
    assert set(worker_env(plan(3), "h:1")) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}


def test_the_host_marks_a_dead_local_member_as_long_unheard_and_leaves_the_rest() -> None:
    s = _RendezvousState()
    now = datetime.now(UTC)
    dead, live, remote = _NodeDesc("box", 10, 0), _NodeDesc("box", 11, 0), _NodeDesc("other", 10, 0)
    s.participants = {dead: 0, live: 1, remote: 2}
    s.last_heartbeats = {dead: now, live: now, remote: now}
    fresh = evicted(stored(s), "box", alive=lambda pid: pid != 10)
    assert fresh is not None
    state = pickle.loads(base64.b64decode(fresh))
    assert state.last_heartbeats[dead].year == 1970  # torch's sanitizer drops it on the next look
    assert state.last_heartbeats[live] == now and state.last_heartbeats[remote] == now  # another machine's
    assert evicted(fresh, "box", alive=lambda pid: pid != 10) is None  # marked once
    assert evicted(stored(s), "box", alive=lambda pid: True) is None
    assert evicted(b"", "box") is None


def test_the_host_refuses_a_forged_state_when_evicting_too() -> None:
    with pytest.raises(pickle.UnpicklingError, match="not part of a rendezvous state"):
        evicted(stored(Forged()), "box")
