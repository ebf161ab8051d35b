"""In-process elastic training: a worker that keeps its process across rendezvous rounds.

Under torchrun (launchers torch-elastic and torch) a worker's death fails its peers'
collectives, and each survivor's torchrun starts its trainer again in a new process: Python,
``import torch``, the CUDA context, the process group and the checkpoint, every time — most
of what a failure or a resize costs. A torch-inprocess worker is the trainer itself and
meets its peers with :class:`ElasticTrainer`, in the job's c10d rendezvous (torch's own
``DynamicRendezvousHandler``, the store the adapter hosts outside the workers). When a peer
dies the survivors' collective fails, they leave the process group, join the next round of
the same rendezvous and go on from the step they had reached, their model still in memory;
a worker that joins (a replacement, a scale-up) gets the state of the most advanced one.
Nothing is redone but the step that failed.

The training step is the caller's ``step_fn(trainer)``; it reads ``trainer.rank``,
``trainer.world_size`` and ``trainer.step`` and runs its collectives on the default process
group. Its contract, the one that makes a failed step safe to redo: **the state changes only
after the step's last collective** (compute, all-reduce the gradients, then
``optimizer.step()`` — the usual data-parallel loop). A step counts once ``step_fn`` returns.

Membership changes happen between steps, agreed by every rank in one small all-reduce per
step: a worker waiting to join (rank 0 looks at most every ``check_seconds``) or a worker
asked to stop (SIGTERM, as an adapter stops a worker of a shrinking job) ends the round after
the current step for everybody; the one stopping leaves the rendezvous and returns.

Environment (set by the adapter from the job; see ``alnair_lifecycle.worker_env``):
``ALNAIR_RDZV_ENDPOINT`` (``host:port`` of the job's c10d store), ``ALNAIR_RDZV_ID``,
``ALNAIR_RDZV_NODES`` (``min:max``), ``ALNAIR_RDZV_CONF`` (torch's rendezvous options,
``k=v,...``) and ``ALNAIR_PROGRESS_FILE`` (``<step> <seconds>`` after every step). Without
``ALNAIR_RDZV_ENDPOINT`` the trainer runs alone, a world of one (the same script, run by hand).

Run on torch 2.15 (CI) and 2.11 (the H200). It relies on a few torch details that torch does
not promise (its rendezvous exit op, the default group's counter, the timeout setter, which
was private before 2.15); ``services/elastic_job/bench/torch_private_check.py`` checks them
on the torch installed, and is the first thing to run after a torch upgrade.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

ENDPOINT_ENV = "ALNAIR_RDZV_ENDPOINT"
ID_ENV = "ALNAIR_RDZV_ID"
NODES_ENV = "ALNAIR_RDZV_NODES"
CONF_ENV = "ALNAIR_RDZV_CONF"
PROGRESS_ENV = "ALNAIR_PROGRESS_FILE"

_JOIN_WAITING, _LEAVING = 1, 2  # the per-step vote: why the round ends after this step

log = logging.getLogger("alnair.trainer")


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


class TrainerConfigError(ValueError):
    """The worker's environment cannot describe a rendezvous; the message says what to set."""


class ElasticTrainer:
    """Runs ``step_fn`` until ``steps``, across whatever rounds the job's membership needs.

    ``state``: what a joining worker must receive (model, optimizer, a sampler...), each with
    ``state_dict``/``load_state_dict``. ``step``: where to start (a checkpoint's step: the
    most advanced worker's state wins, so a newcomer may start anywhere).
    ``collective_timeout_s``: the longest a collective waits for a peer that hangs (a dead
    one fails it at once): longer than the longest step or checkpoint save, since peers wait
    in the step's vote meanwhile; a hung worker is also the controller's stall detector's to
    find (``ALNAIR_PROGRESS_FILE``). ``join_timeout_s``: the longest a new round's group waits for a
    member that died while the round closed. ``max_failed_rounds``: rounds in a row that fail
    before completing a step, after which the error is the caller's (a bug in ``step_fn``
    fails every round; a dead peer fails one)."""

    def __init__(self, state: Mapping[str, Stateful], *, step: int = 0, backend: str = "gloo",
                 collective_timeout_s: float = 120.0, join_timeout_s: float = 10.0, check_seconds: float = 0.5,
                 max_failed_rounds: int = 3, env: Mapping[str, str] | None = None) -> None:
        self.state = dict(state)
        self.step = step
        self.backend = backend
        self.collective_timeout = timedelta(seconds=collective_timeout_s)
        self.join_timeout = timedelta(seconds=join_timeout_s)
        self.check_seconds = check_seconds
        self.max_failed_rounds = max_failed_rounds
        self.env = dict(os.environ if env is None else env)
        self.rank, self.world_size = 0, 1
        self.rounds = 0  # rounds joined
        self.peer_failures = 0  # rounds that ended in a failed collective
        self._handler: Any = None
        self._stop_asked = False
        self._next_check = 0.0

    # -- the loop -------------------------------------------------------------------------

    def run(self, step_fn: Callable[[ElasticTrainer], None], steps: int) -> None:
        self._handler = _handler(self.env)
        restore = self._catch_sigterm()
        failed_in_a_row = 0
        try:
            while self.step < steps:
                began_at = self.step
                try:
                    if not self._join():
                        return  # the job ended while this worker waited to join
                    self._train(step_fn, steps)
                except RuntimeError as e:  # torch's DistError and gloo's errors are RuntimeErrors
                    self._leave_group()
                    failed_in_a_row = 0 if self.step > began_at else failed_in_a_row + 1
                    if failed_in_a_row >= self.max_failed_rounds:
                        raise
                    self.peer_failures += 1
                    log.warning("round %d failed at step %d (%s): joining the next", self.rounds, self.step, e)
                    continue
                failed_in_a_row = 0
                if self.step >= steps:  # the last step's vote passed: every peer is done too
                    self._leave_group()
                    if self.rank == 0 and self._handler is not None:
                        self._handler.shutdown()  # closed: a worker still waiting to join returns
                    return
                self._leave_group()
                if self._stop_asked:
                    self._leave_rendezvous()
                    return
        finally:
            if self._stop_asked:
                # Leaving: a repeated SIGTERM (the adapter sends more than one) must not kill
                # it on its way out, and Python restores the default action of a signal with a
                # Python handler while it shuts down; an ignored one stays ignored.
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            else:
                restore()

    def _train(self, step_fn: Callable[[ElasticTrainer], None], steps: int) -> None:
        """Steps until the job is done or a vote ends the round."""
        while self.step < steps:
            began = time.monotonic()
            step_fn(self)
            self.step += 1
            self._report(time.monotonic() - began)
            if self._vote():
                return

    # -- rounds ---------------------------------------------------------------------------

    def _join(self) -> bool:
        import torch.distributed as dist

        if self._handler is None:  # alone
            store, self.rank, self.world_size = dist.HashStore(), 0, 1
        else:
            from torch.distributed.elastic.rendezvous import RendezvousClosedError

            try:
                info = self._handler.next_rendezvous()
            except RendezvousClosedError:
                return False
            store, self.rank, self.world_size = info.store, info.rank, info.world_size
        # Every member of a closed round starts its group at once; one that died meanwhile is
        # waited for only join_timeout (the store cannot tell), not a collective's timeout.
        dist.init_process_group(self.backend, store=store, rank=self.rank, world_size=self.world_size,
                                timeout=self.join_timeout)
        _set_collective_timeout(self.collective_timeout)  # gloo connected every pair
        self.rounds += 1
        self._sync_state()
        log.info("round %d: rank %d of %d at step %d", self.rounds, self.rank, self.world_size, self.step)
        return True

    def _sync_state(self) -> None:
        """Every rank takes the state of the lowest rank among the most advanced ones."""
        import torch
        import torch.distributed as dist

        if self.world_size == 1:
            return
        span = torch.tensor([self.step, -self.step], dtype=torch.int64)
        dist.all_reduce(span, op=dist.ReduceOp.MAX)
        newest, oldest = int(span[0]), -int(span[1])
        if newest == oldest:
            return  # the same steps everywhere: the same state (the step contract)
        source = torch.tensor([self.rank if self.step == newest else self.world_size], dtype=torch.int64)
        dist.all_reduce(source, op=dist.ReduceOp.MIN)
        box = [{k: v.state_dict() for k, v in self.state.items()} if self.rank == int(source) else None]
        dist.broadcast_object_list(box, src=int(source))
        if self.rank != int(source):
            for key, value in self.state.items():
                value.load_state_dict(box[0][key])
            self.step = newest

    def _vote(self) -> int:
        import torch
        import torch.distributed as dist

        mine = _LEAVING if self._stop_asked else 0
        if self.rank == 0 and self._handler is not None and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + self.check_seconds
            if self._handler.num_nodes_waiting() > 0:
                mine |= _JOIN_WAITING
        if self.world_size == 1:
            return mine
        vote = torch.tensor([mine], dtype=torch.int64)
        dist.all_reduce(vote, op=dist.ReduceOp.MAX)  # any reason ends the round for all
        return int(vote)

    def _leave_group(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        # torch names a default group after a process-wide counter (its keys in the store
        # start with that name) that only destroy_process_group resets: a group that failed to
        # start leaves it advanced, and the next one would be named unlike a newcomer's, whose
        # first group it is — they would wait for each other's keys until the timeout.
        world = getattr(dist.distributed_c10d, "_world", None)
        if world is not None and not dist.is_initialized():
            world.group_count = 0

    def _leave_rendezvous(self) -> None:
        """Out of the rendezvous at once, so the others' next round need not wait for this
        worker's keep-alive to lapse (torch has no public call for it; its own exit step)."""
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

        h = self._handler
        with contextlib.suppress(Exception):
            h._stop_heartbeats()
            h._op_executor.run(dr._RendezvousExitOp(), time.monotonic() + 10)

    # -- around the steps -----------------------------------------------------------------

    def _report(self, seconds: float) -> None:
        path = self.env.get(PROGRESS_ENV)
        if not path:
            return
        with open(path + ".tmp", "w") as f:
            f.write(f"{self.step} {seconds:.6f}\n")
        os.replace(path + ".tmp", path)

    def _catch_sigterm(self) -> Callable[[], None]:
        """SIGTERM (an adapter stopping this worker) ends the round after the current step,
        unless the caller installed its own handler."""
        if self._handler is None or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return lambda: None

        def asked(*_: object) -> None:
            self._stop_asked = True

        signal.signal(signal.SIGTERM, asked)
        return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)



def _set_collective_timeout(timeout: timedelta) -> None:
    """The default group's timeout from now on: ``set_timeout``, public since torch 2.15;
    before it (PyTorch 2.11 on the H200) the same call was ``_set_pg_timeout``."""
    import torch.distributed.distributed_c10d as c10d

    setter = getattr(c10d, "set_timeout", None) or c10d._set_pg_timeout
    setter(timeout)

def _handler(env: Mapping[str, str]) -> Any:
    """torch's c10d rendezvous handler for the job's rendezvous; None when run alone."""
    endpoint = env.get(ENDPOINT_ENV, "")
    if not endpoint:
        return None
    run_id, nodes = env.get(ID_ENV, ""), env.get(NODES_ENV, "")
    low, _, high = nodes.partition(":")
    if not run_id or not low.isdigit() or not (high or low).isdigit():
        raise TrainerConfigError(
            f"{ENDPOINT_ENV} is set but {ID_ENV}={run_id!r} / {NODES_ENV}={nodes!r} cannot name a rendezvous "
            "(want an id and min:max): run this trainer as a worker of a TrainingJob with launcher: "
            "torch-inprocess, whose adapter sets all four, or unset them all to train alone")
    conf = {}
    for item in filter(None, env.get(CONF_ENV, "").split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise TrainerConfigError(f"{CONF_ENV} item {item!r} is not key=value")
        conf[key.strip()] = value.strip()
    # A round's rank 0 publishes its address the moment the round closes, and the others wait
    # for it with the store's read timeout: torch's 60 s would be how long a rank 0 that died
    # right then holds its peers.
    conf.setdefault("read_timeout", "10")
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    params = RendezvousParameters(backend="c10d", endpoint=endpoint, run_id=run_id, min_nodes=int(low),
                                  max_nodes=int(high or low), **conf)
    return get_rendezvous_handler(params)
