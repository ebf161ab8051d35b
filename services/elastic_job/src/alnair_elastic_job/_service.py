"""The elastic-job service: the bus wired to the controller and its one state machine.

It reads the users' job commands (``alnair.cmd.job.<name>``), its workers' lifecycle
(``alnair.workload.events``, workers labelled with their job), the jobs' rendezvous
rounds (``alnair.job.<name>.rendezvous``) and training steps (``alnair.job.<name>.step``,
which arm the stall detector) and the scheduler's permanent refusals of its workers
(``alnair.sched.failed``: a gang that can never be placed fails at once, Unschedulable, instead
of waiting out its scheduling timeout); every change of a job's status is published as a
JobState on ``alnair.job.<name>.state`` with the message id ``<namespace>.<name>.<generation>``,
so a retried publish is stored once. A bad command is terminated and reported as an error
event (the CLI waits on it); a refused scale is the same.

Where its inputs come from and its plans go:

* **Capacity** comes from the ``node_inventory`` and ``gpu_allocations`` buckets, watched
  (``_capacity``); ``capacity`` (a callable returning the free cards) replaces them in tests.
  Throughput per world size is not published by the profiler yet, so every job is
  allocated with the linear-with-efficiency fallback (``Controller.measured`` takes it).
* **Workers.** Each transition also publishes the job's WorkerPlan on
  ``alnair.cmd.workers.<name>`` (declarative: live workers wanted, a gang size, the uids to
  stop, a rendezvous id per gang; see job.proto). Both adapters carry it out with the same
  rules (``alnair_lifecycle.plan_changes``/``worker_command``): the local agent as local
  workloads with a rendezvous host process per gang, kube-bridge as pods, a PodGroup and a
  rendezvous pod and Service per gang; each relays the closed rendezvous rounds (and the
  local agent the workers' steps).

Restarts lose nothing: every changed job's TrainingJobRecord (spec, state, worker sets) is
written to the ``training_jobs`` bucket before its JobState is published, and read back on
start; a fact redelivered after a crash finds the record already holding it and changes
nothing (the state machine is idempotent per fact), and the restored jobs' states are
published again under their old message ids. One controller writes the bucket: replicas
stand by behind a lease (``leader_elected``). Which job each live worker belongs to (what a
refusal, naming only the worker, is matched by) is read back from the adapters'
``workload_states`` bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from pydantic import Field

from alnair.v1 import allocation_pb2, inventory_pb2, job_pb2, scheduling_pb2, workload_pb2
from alnair_common import (
    DurableConsumer,
    KVWatch,
    PermanentError,
    Service,
    ServiceSettings,
    TypedKV,
    subjects,
)
from alnair_lifecycle import STATES_BUCKET, state_key

from . import _metrics
from ._allocator import FreeCard, Hysteresis
from ._capacity import ALLOCATIONS_BUCKET, INVENTORY_BUCKET, free_cards, whole_cards
from ._controller import Controller, TrackedJob, job_key, worker_actions
from ._errors import ElasticJobError
from ._job_record import BUCKET, record_from_proto, record_key, record_to_proto
from ._job_states import DeleteCommand
from ._state_codec import Submit, command_from_proto, state_to_proto, worker_plan
from ._worker_events import refusal_input, rendezvous_input, step_input, worker_input, worker_of

_EARLY_REFUSALS = 1024
_LIVE = (workload_pb2.WORKLOAD_PHASE_PENDING, workload_pb2.WORKLOAD_PHASE_BOUND,
         workload_pb2.WORKLOAD_PHASE_RUNNING)


def _live_worker(w: workload_pb2.Workload) -> tuple[str, str] | None:
    """(job key, rendezvous id) of a job's worker that has not ended; None otherwise."""
    return worker_of(w) if w.phase in _LIVE else None


class ElasticJobSettings(ServiceSettings):
    consumer_prefix: str = Field("elastic-job", pattern=r"^[A-Za-z0-9_-]+$",
                                 description="Prefix of this controller's durable consumer names")
    tick_seconds: float = Field(1.0, gt=0, le=60,
                                description="How often timeouts are checked and capacity divided")
    rescale_interval_seconds: float = Field(
        300.0, ge=0, le=86400, description="A running job whose size changed less than this long "
                                           "ago keeps it (each rescale restarts its trainers)")
    rescale_min_gain: float = Field(
        0.1, ge=0, le=10, description="Running jobs are resized only if that raises cluster goodput "
                                      "by this share over keeping their sizes")


class ElasticJobService(Service):
    name = "elastic-job"
    role = ("training jobs through one state machine (Pending … Succeeded/Failed, reasons and "
            "timeouts), GPUs divided by the allocator; the adapters start the workers")
    settings_class = ElasticJobSettings
    # One controller acts on the jobs; replicas stand by (a lease on the bus). Controllers
    # with their own consumers (another consumer_prefix) are not replicas.
    leader_elected = True

    @property
    def lease_name(self) -> str:
        return f"elastic-job-{self.settings.consumer_prefix}"  # type: ignore[attr-defined]

    def __init__(self, settings: ServiceSettings,
                 capacity: Callable[[], Iterable[FreeCard] | None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(settings)
        s: ElasticJobSettings = settings  # type: ignore[assignment]
        self.controller = Controller(Hysteresis(s.rescale_min_gain, s.rescale_interval_seconds))
        self.capacity = capacity
        # Every healthy card at full size (from the inventory bucket): with an injected
        # ``capacity`` it is unknown, and no pending job is told that it can never fit.
        self.cluster: Callable[[], list[FreeCard] | None] | None = None
        self.clock = clock
        self._lock = asyncio.Lock()
        self._forgotten: list[tuple[str, str]] = []
        # Live workers of any job, placed or not: uid → (job key, rendezvous id). The scheduler
        # commits a worker's share before its adapter reports it placed, and those shares are
        # the jobs' own, not taken; and its refusals name only the worker's uid.
        self._workers: dict[str, tuple[str, str]] = {}
        # Permanent refusals that came before their worker's first event (the two arrive on
        # different streams), by uid, oldest dropped first beyond _EARLY_REFUSALS.
        self._early: OrderedDict[str, scheduling_pb2.SchedulingFailure] = OrderedDict()
        self._states: TypedKV[workload_pb2.WorkloadEvent]  # the adapters' last states (setup)

    async def setup(self) -> None:
        s: ElasticJobSettings = self.settings  # type: ignore[assignment]
        assert self.bus is not None
        if self.capacity is None:
            self.capacity = await self._watch_capacity()
        self.records = await TypedKV.open(self.bus, BUCKET, job_pb2.TrainingJobRecord)
        await self._restore()
        await self._restore_workers()
        p = s.consumer_prefix
        for stream, durable, subject, message_type, handler in (
            ("COMMANDS", f"{p}-commands", subjects.wildcard("alnair.cmd.job.<name>"),
             job_pb2.JobCommand, self._on_command),
            ("WORKLOADS", f"{p}-workers", subjects.workload_events(), workload_pb2.WorkloadEvent,
             self._on_workload),
            ("JOBS", f"{p}-rendezvous", subjects.wildcard("alnair.job.<name>.rendezvous"),
             job_pb2.RendezvousRound, self._on_rendezvous),
            ("SCHEDULING", f"{p}-refusals", subjects.sched_failed(), scheduling_pb2.SchedulingFailure,
             self._on_refusal),
        ):
            await self.consume(DurableConsumer(self.bus, stream=stream, durable=durable,
                                               subject=subject, message_type=message_type,
                                               handler=handler, fetch_timeout=0.5))
        await self.bus.subscribe(subjects.wildcard("alnair.job.<name>.step"), job_pb2.StepReport,
                                 self._on_step)
        self.spawn(self._loop(s.tick_seconds), "job-clock")

    async def _watch_capacity(self) -> Callable[[], list[FreeCard] | None]:
        """Follow both buckets; the callable answers from what the watches have seen, and
        None until both have read every current value: dividing an inventory not yet read
        would preempt every running job of a restarted controller."""
        assert self.bus is not None
        inventories: dict[str, inventory_pb2.NodeInventory] = {}
        allocations: dict[str, allocation_pb2.CardAllocation] = {}
        watches: list[KVWatch] = []
        for bucket, message_type, into in ((INVENTORY_BUCKET, inventory_pb2.NodeInventory, inventories),
                                           (ALLOCATIONS_BUCKET, allocation_pb2.CardAllocation, allocations)):
            watch = await (await TypedKV.open(self.bus, bucket, message_type)).watch()
            watches.append(watch)
            self.spawn(self._follow(watch, into), f"watch:{bucket}")
        self.health.checks["capacity"] = self._check_capacity(watches)

        def current() -> list[FreeCard] | None:
            if not _caught_up(watches):
                return None
            ours = frozenset(self._workers).union(w for t in self.controller.jobs.values() for w in t.status.placed)
            by_uuid = {a.gpu_uuid: a for a in allocations.values()}
            return free_cards(inventories.values(), by_uuid, ours)

        def cluster() -> list[FreeCard] | None:
            return whole_cards(inventories.values()) if _caught_up(watches) else None

        self.cluster = cluster
        return current

    @staticmethod
    def _check_capacity(watches: list[KVWatch]) -> Callable[[], Awaitable[str | None]]:
        async def check() -> str | None:
            return None if _caught_up(watches) else "reading the GPU buckets"
        return check

    @staticmethod
    async def _follow(watch: KVWatch, into: dict) -> None:
        async for update in watch:
            if update.value is None:
                into.pop(update.key, None)
            else:
                into[update.key] = update.value

    async def _restore(self) -> None:
        restored = []
        for key, rec in (await self.records.current()).items():
            try:
                tracked = record_from_proto(rec)
            except ElasticJobError as e:
                self.log.warning("unreadable training job record skipped", key=key, error=str(e))
                continue
            self.controller.restore(tracked)
            restored.append(tracked)
        await self._publish(restored, store=False)
        self.log.info("training jobs restored", jobs=len(restored))

    async def _restore_workers(self) -> None:
        """The live workers of every job, from each workload's last state: the events this
        process read before a restart are not delivered again, and a refusal of such a worker
        (a gang member still pending) must find its job, not wait for a worker event that may
        never come."""
        assert self.bus is not None
        self._states = states = await TypedKV.open(self.bus, STATES_BUCKET, workload_pb2.WorkloadEvent)
        for event in (await states.current()).values():
            worker = _live_worker(event.workload)
            if worker is not None:
                self._workers.setdefault(event.workload.ref.uid, worker)
        self.log.info("job workers restored", workers=len(self._workers))

    async def _loop(self, every: float) -> None:
        while not self._stop.is_set():
            async with self._lock:
                now = self.clock()
                cards = self.capacity() if self.capacity else None
                cluster = self.cluster() if self.cluster else None
                changed = self.controller.reallocate(cards, now, cluster) if cards is not None else []
                await self._publish(changed + self.controller.tick(now))
                _metrics.observe(self.controller.jobs.values(), self._forgotten, now)
                self._forgotten.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), every)

    async def _on_command(self, subject: str, cmd: job_pb2.JobCommand) -> None:
        namespace, name, action = command_from_proto(cmd)
        if subjects.name_of(subject.split(".")[-1]) != name:
            raise PermanentError(f"command for job {name!r} arrived on {subject!r}; publish it on "
                                 f"{subjects.job_command(name)}", obj=f"{namespace}/{name}")
        async with self._lock:
            now = self.clock()
            try:
                if isinstance(action, Submit):
                    changed = self.controller.submit(action.job, now)
                else:
                    changed = self.controller.apply(job_key(namespace, name), action, now)
            except ElasticJobError as e:
                self.log.info("job command refused", job=f"{namespace}/{name}", error=str(e))
                e.obj = f"{namespace}/{name}"  # the refusal's ErrorEvent names the job's namespace
                raise
            await self._publish(changed)
            if isinstance(action, DeleteCommand) and job_key(namespace, name) not in self.controller.jobs:
                await self.records.delete(record_key(namespace, name))  # a finished job forgotten
                self._forgotten.append((namespace, name))

    async def _on_workload(self, _: str, event: workload_pb2.WorkloadEvent) -> None:
        w = event.workload
        if (worker := _live_worker(w)) is not None:
            self._workers[w.ref.uid] = worker
        else:
            self._workers.pop(w.ref.uid, None)
        found = worker_input(event)
        if found is not None:
            await self._apply(*found)
        early = self._early.pop(w.ref.uid, None)
        if early is not None and w.ref.uid in self._workers:
            await self._on_refusal("", early)

    async def _on_refusal(self, _: str, f: scheduling_pb2.SchedulingFailure) -> None:
        """A permanent refusal of a live worker of a job → its job's input. A worker whose
        event has not been read yet is looked up in its adapter's record (written just after
        the event), else the refusal is kept until the event comes."""
        if not f.permanent or not f.workload.uid:
            return
        worker = self._workers.get(f.workload.uid) or await self._recorded_worker(f.workload.uid)
        # Its event may have been read while the record was: kept now, the refusal would wait
        # for an event that already came (and the job for the 600 s scheduling timeout).
        worker = worker or self._workers.get(f.workload.uid)
        if worker is None:
            self._early[f.workload.uid] = f
            while len(self._early) > _EARLY_REFUSALS:
                self._early.popitem(last=False)
            return
        self.log.info("worker refused by the scheduler", job=worker[0], worker=f.workload.uid,
                      code=f.code, reason=f.reason)
        await self._apply(*refusal_input(f, worker))

    async def _recorded_worker(self, uid: str) -> tuple[str, str] | None:
        found = await self._states.get(state_key(uid))
        return None if found is None else _live_worker(found.value.workload)

    async def _on_rendezvous(self, subject: str, r: job_pb2.RendezvousRound) -> None:
        await self._apply(*rendezvous_input(subjects.name_of(subject.split(".")[2]), r))

    async def _on_step(self, subject: str, r: job_pb2.StepReport) -> None:
        await self._apply(*step_input(subjects.name_of(subject.split(".")[2]), r))

    async def _apply(self, key: str, event: object) -> None:
        async with self._lock:
            if key not in self.controller.jobs:
                self.log.info("event for an unknown job ignored", job=key)
                return
            await self._publish(self.controller.apply(key, event, self.clock()))  # type: ignore[arg-type]

    async def _publish(self, changed: list[TrackedJob], *, store: bool = True) -> None:
        assert self.bus is not None
        if store:
            _metrics.transitioned(changed)
        for t in changed:
            s = t.status
            now = self.clock()
            if store:
                await self.records.put(record_key(t.job.namespace, t.job.name), record_to_proto(t, now))
            await self.bus.publish(subjects.job_state(t.job.name), state_to_proto(t.job, s, now, s.goodput(now)),
                                   msg_id=f"{t.job.namespace}.{t.job.name}.{s.generation}")
            actions = worker_actions(t)
            await self.bus.publish(subjects.job_workers(t.job.name),
                                   worker_plan(t.job, s, actions.create, actions.gang),
                                   msg_id=f"plan.{t.job.namespace}.{t.job.name}.{s.generation}")
            self.log.info("job transition", job=t.key, phase=s.phase.value, reason=s.reason,
                          cause=s.cause, world_size=s.world_size, target=s.target,
                          restarts=s.restarts, create_workers=actions.create, gang=actions.gang,
                          stop_workers=sorted(actions.stop))


def _caught_up(watches: list[KVWatch]) -> bool:
    """Both GPU buckets read to their current values (dividing less would be wrong)."""
    return all(w.is_caught_up for w in watches)
