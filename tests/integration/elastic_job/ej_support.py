"""The elastic-job controller run in-process on a real nats-server, and what the tests that
drive it over the bus play: the adapters' worker events and records, the scheduler's refusals,
the user's commands, and an observer of the published states (here and kube-bridge's tests,
whose conftest puts this folder on the path)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

import alnair_elastic_job as ej
from alnair.v1 import common_pb2, job_pb2, platform_pb2, scheduling_pb2, workload_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.testing import wait_for
from alnair_lifecycle import RENDEZVOUS_LABEL, state_key

JOB = ej.TrainingJob("resnet", ("python", "train.py"), 2, 3, ej.WorkerRequest(whole_gpus=1))


CARDS = [ej.FreeCard("node1", f"GPU-{i}", 80) for i in range(3)]


class Observer:
    def __init__(self) -> None:
        self.states: list[job_pb2.JobState] = []
        self.errors: list[platform_pb2.ErrorEvent] = []
        self.plans: list[job_pb2.WorkerPlan] = []

    async def on_plan(self, _: str, p: job_pb2.WorkerPlan) -> None:
        self.plans.append(p)

    async def on_state(self, _: str, s: job_pb2.JobState) -> None:
        self.states.append(s)

    async def on_error(self, _: str, e: platform_pb2.ErrorEvent) -> None:
        self.errors.append(e)

    async def phase(self, phase: int, reason: str = "", timeout: float = 10.0) -> job_pb2.JobState:
        async def probe() -> job_pb2.JobState | None:
            last = self.states[-1] if self.states else None
            ok = last is not None and last.phase == phase and (not reason or last.reason == reason)
            return last if ok else None
        return await wait_for(probe, timeout=timeout, what=f"JobState phase {phase} {reason}")


async def command(bus: Bus, **action: object) -> None:
    cmd = job_pb2.JobCommand(name="resnet", request_id=uuid.uuid4().hex, **action)  # type: ignore[arg-type]
    await bus.publish(subjects.job_command("resnet"), cmd, msg_id=cmd.request_id)


def worker_event(uid: str, phase: int, code: int | None = None, rendezvous: str = "") -> workload_pb2.WorkloadEvent:
    """What an adapter publishes (and records) for worker ``uid`` of job resnet."""
    labels = {ej.JOB_LABEL: "resnet", ej.JOB_NAMESPACE_LABEL: "default"}
    if rendezvous:
        labels[RENDEZVOUS_LABEL] = rendezvous
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(uid=uid, name=f"resnet-{uid}", namespace="local",
                                                         mode=common_pb2.MODE_LOCAL),
                              phase=phase, labels=labels)
    if code is not None:
        w.exit_code = code
    return workload_pb2.WorkloadEvent(workload=w, source="local-agent@test")


async def worker(bus: Bus, uid: str, phase: int, code: int | None = None, rendezvous: str = "",
                 states: TypedKV[workload_pb2.WorkloadEvent] | None = None) -> None:
    """The adapter's event for worker ``uid`` (and, with ``states``, its last-state record)."""
    event = worker_event(uid, phase, code, rendezvous)
    if states is not None:
        await states.put(state_key(uid), event)
    await bus.publish(subjects.workload_events(), event)


async def refusal(bus: Bus, uid: str, *, permanent: bool, code: str = "request-exceeds-card") -> None:
    """What the scheduler publishes when it cannot place worker ``uid``."""
    await bus.publish(subjects.sched_failed(), scheduling_pb2.SchedulingFailure(
        workload=common_pb2.WorkloadRef(uid=uid, name=f"resnet-{uid}", namespace="local",
                                        mode=common_pb2.MODE_LOCAL),
        reason="no card has 200 GiB: the largest has 80", code=code, permanent=permanent))


async def last_state_where(seen: Observer, ok) -> job_pb2.JobState | None:  # type: ignore[no-untyped-def]
    return next((s for s in reversed(seen.states) if ok(s)), None)


async def known_worker(service: ej.ElasticJobService, uid: str) -> bool:
    return uid in service._workers  # noqa: SLF001 - what the controller has read so far


async def early_refusal(service: ej.ElasticJobService, uid: str) -> bool:
    return uid in service._early  # noqa: SLF001


async def workers_started(service: ej.ElasticJobService, n: int) -> bool:
    t = service.controller.jobs.get("default/resnet")
    return t is not None and len(t.status.started) == n


async def plan_of(seen: Observer, generation: int) -> job_pb2.WorkerPlan | None:
    return next((p for p in seen.plans if p.generation == generation), None)


async def first_of(items: list) -> object:
    return items[0] if items else None


async def controller_ready(service: ej.ElasticJobService, task: asyncio.Task) -> bool:
    if task.done():
        task.result()
    return service.ready.is_set()


async def start_controller(url: str, *, cards: Sequence[ej.FreeCard] = CARDS,
                           buckets: bool = False) -> tuple[ej.ElasticJobService, asyncio.Task]:
    """The service, ready; its capacity is ``cards``, or with ``buckets`` read from the GPU
    buckets as deployed."""
    service = ej.ElasticJobService(ej.ElasticJobSettings(nats_url=url, node_name="test", tick_seconds=0.1),
                                   capacity=None if buckets else lambda: list(cards))
    task = asyncio.create_task(service.run())
    await wait_for(lambda: controller_ready(service, task), timeout=20, what="elastic-job ready")
    return service, task


async def stop_controller(service: ej.ElasticJobService, task: asyncio.Task) -> None:
    service.request_stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 20)


@contextlib.asynccontextmanager
async def running_controller(nats_url: str, cards: Sequence[ej.FreeCard]) -> AsyncIterator[ej.ElasticJobService]:
    """The service, ready, dividing ``cards`` (its capacity); stopped after."""
    service, task = await start_controller(nats_url, cards=cards)
    try:
        yield service
    finally:
        await stop_controller(service, task)
