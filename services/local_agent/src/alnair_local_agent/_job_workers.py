"""Training-job workers in local mode: the elastic-job controller's WorkerPlans carried out.

For each plan (``alnair.cmd.workers.<name>``, newer generations only) the agent counts the
job's live workers on this machine, stops the planned ones (SIGTERM to the worker's process
group — torchrun ends its trainer — then SIGKILL after the grace; a pending one is withdrawn)
and submits the missing ones to itself as local workloads, labelled with their job, so the
scheduler places them like any other and their lifecycle reaches the controller as usual. A plan
whose job already has a newer plan waiting in the stream only stops
(:func:`alnair_lifecycle.newer_plan_waiting`).
Each worker runs the job's command under torchrun (:func:`alnair_lifecycle.worker_command`)
in the submitter's directory and environment, meeting in its gang's rendezvous, hosted by
:class:`RendezvousHosts`. Twice a second the agent relays what the hosts and the workers
wrote: each closed rendezvous round (members mapped from torchrun's pid to the worker's uid)
on ``alnair.job.<name>.rendezvous``, and the newest step a worker wrote to its
``ALNAIR_PROGRESS_FILE`` (``<step> <seconds it took>``) on ``alnair.job.<name>.step``. Workers hold no bus credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from alnair.v1 import common_pb2, job_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, PermanentError, get_logger, subjects
from alnair_lifecycle import (
    JOB_LABEL,
    JOB_NAMESPACE_LABEL,
    RENDEZVOUS_LABEL,
    newer_plan_waiting,
    plan_changes,
    worker_command,
    worker_env,
    worker_labels,
)

from ._agent import Agent
from ._job_files import JobFiles
from ._rendezvous import RendezvousHosts
from ._workspace import Workspace, still_running

log = get_logger("alnair.local-agent")
P = wl.WorkloadPhase
LIVE = (P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING)


@dataclass
class _Job:
    """What the relay needs of one job between plans."""

    namespace: str
    name: str
    rendezvous_id: str = ""
    workers: set[str] = field(default_factory=set)
    round: int = 0
    step: int = 0


class JobWorkers:
    def __init__(self, bus: Bus, agent: Agent, jobs_dir: Path, *, stop_grace: float = 10.0,
                 relay_seconds: float = 0.5) -> None:
        self.bus = bus
        self.agent = agent
        self.jobs_dir = jobs_dir
        self.stop_grace = stop_grace
        self.relay_seconds = relay_seconds
        self.hosts = RendezvousHosts()
        self.jobs: dict[str, _Job] = {}
        self.source = f"local-agent@{socket.gethostname()}"
        self._lock = asyncio.Lock()
        self._kills: set[asyncio.Task[None]] = set()

    # -- plans ----------------------------------------------------------------------------

    async def on_plan(self, _subject: str, plan: job_pb2.WorkerPlan) -> None:
        spec = plan.spec
        if not spec.name:
            raise PermanentError("worker plan without spec.name; the elastic-job controller "
                                 "always sends the job's spec")
        namespace = spec.namespace or "default"
        files = JobFiles.of(self.jobs_dir, namespace, spec.name)
        async with self._lock:
            if plan.generation <= files.applied():
                return  # redelivered, or older than one carried out
            live = await self._live(namespace, spec.name)
            changes = plan_changes(plan, live, pending=[u for u, w in live.items()
                                                         if w.phase == P.WORKLOAD_PHASE_PENDING],
                                   gangs={u: w.labels.get(RENDEZVOUS_LABEL, "") for u, w in live.items()})
            for uid in changes.stop:
                await self._stop(live[uid])
            job = self.jobs.setdefault(f"{namespace}.{spec.name}", _Job(namespace, spec.name))
            job.workers = set(live) - set(changes.stop)
            if changes.create and await newer_plan_waiting(self.bus, plan):
                # Its workers would be stopped by the newer plan (a new gang) or counted by it
                # (a new target): starting them, and maybe a rendezvous host (seconds), only
                # delays the plan that matters. Its stops are carried out above.
                log.info("worker plan superseded: newer plan waiting, none created",
                         job=f"{namespace}/{spec.name}", generation=plan.generation)
                return
            if changes.create:
                env = files.environment()
                if env is None:
                    raise PermanentError(
                        f"training job {namespace}/{spec.name} has no environment in {files.path}: "
                        "local jobs must be submitted with `alnair job submit` on this machine")
                endpoint = await self.hosts.ensure(files, plan.rendezvous_id, env)
                for _ in range(changes.create):
                    job.workers.add(await self._create(plan, endpoint, files, env))
            if job.rendezvous_id != plan.rendezvous_id:  # a new gang: its rounds and steps anew
                job.rendezvous_id, job.round, job.step = plan.rendezvous_id, 0, 0
            self.hosts.stop(files, keep=plan.rendezvous_id if plan.target else None)
            # A job that ended is forgotten by the controller; one submitted again under its
            # name counts its plans from 1 again, which must not look old here.
            ended = plan.phase in (job_pb2.JOB_PHASE_SUCCEEDED, job_pb2.JOB_PHASE_FAILED,
                                   job_pb2.JOB_PHASE_DELETED)
            files.record_applied(0 if ended else plan.generation)
            log.info("worker plan applied", job=f"{namespace}/{spec.name}", generation=plan.generation,
                     target=plan.target, stopped=len(changes.stop), created=changes.create)

    async def _live(self, namespace: str, name: str) -> dict[str, wl.Workload]:
        found = {}
        for event in await self.agent.lifecycle.states():
            w = event.workload
            if (w.labels.get(JOB_LABEL) == name and w.labels.get(JOB_NAMESPACE_LABEL) == namespace
                    and w.phase in LIVE and w.ref.mode == common_pb2.MODE_LOCAL
                    and w.node in ("", self.agent.node)):
                found[w.ref.uid] = w
        return found

    async def _create(self, plan: job_pb2.WorkerPlan, endpoint: str, files: JobFiles,
                      env: dict[str, str]) -> str:
        spec = plan.spec
        uid = uuid.uuid4().hex
        base = re.sub(r"[^a-z0-9_-]+", "-", spec.name.lower()).strip("-_")[:48] or "job"
        request = common_pb2.GpuRequest(memory_gib=spec.replica_request.memory_gib,
                                        compute_percent=spec.replica_request.compute_percent)
        if spec.whole_gpus:
            if spec.whole_gpus > 1:
                raise PermanentError(f"training job {spec.name}: {spec.whole_gpus} whole GPUs per "
                                     "worker; a local worker gets one card (use gpus: 1)")
            request = self._whole_card(spec.name)
        workload = wl.Workload(
            ref=common_pb2.WorkloadRef(uid=uid, name=f"{base}-{uid[:8]}", namespace="local",
                                       mode=common_pb2.MODE_LOCAL),
            request=request, scheduler_name="alnair-scheduler", phase=P.WORKLOAD_PHASE_PENDING,
            command=worker_command(plan, endpoint), working_dir=files.working_dir(),
            labels=worker_labels(plan))
        workload.created_at.GetCurrentTime()
        workspace = Workspace.of(self.agent.workloads_dir, uid)
        workspace.write_environment(env)
        workspace.write_worker_environment(worker_env(plan, endpoint))
        await self.agent.on_submit("", workload)
        return uid

    def _whole_card(self, job: str) -> common_pb2.GpuRequest:
        """A whole card as a share the scheduler places: all of the compute (so nothing else
        fits beside it) and the memory of this machine's smallest healthy card (so any free
        card holds it; on a machine of one model, all of the card)."""
        sizes = [g.memory_gib for g in self.agent.gpus.gpus if g.healthy]
        if not sizes:
            raise PermanentError(f"training job {job}: its workers ask for whole GPUs (gpus: 1) and this "
                                 "machine has no healthy GPU")
        return common_pb2.GpuRequest(memory_gib=min(sizes), compute_percent=100)

    async def _stop(self, w: wl.Workload) -> None:
        if w.phase == P.WORKLOAD_PHASE_PENDING and await self.agent.withdraw(w):
            return  # else it was bound meanwhile: stopped as a running one below
        workspace = Workspace.of(self.agent.workloads_dir, w.ref.uid)
        process = workspace.process()
        if process is None or not still_running(*process):
            return
        log.info("stopping worker", worker=w.ref.name, pid=process[0])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process[0], signal.SIGTERM)  # the reaper waits; torchrun ends its trainer
        task = asyncio.create_task(self._kill_after(workspace, process))
        self._kills.add(task)
        task.add_done_callback(self._kills.discard)

    async def _kill_after(self, workspace: Workspace, process: tuple[int, str]) -> None:
        await asyncio.sleep(self.stop_grace)
        child = workspace.child_pid()
        if still_running(*process) and child is not None:
            log.warning("worker ignored SIGTERM; killed", workspace=str(workspace.path), pid=child)
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)  # the reaper ends what it left and records it

    # -- relaying what workers and hosts wrote ----------------------------------------------

    async def relay(self) -> None:
        while True:
            for job in list(self.jobs.values()):
                try:
                    await self._relay(job)
                except Exception as e:  # noqa: BLE001 - one job's files must not stop the rest
                    log.warning("relay failed", job=f"{job.namespace}/{job.name}", error=str(e))
            await asyncio.sleep(self.relay_seconds)

    async def _relay(self, job: _Job) -> None:
        files = JobFiles.of(self.jobs_dir, job.namespace, job.name)
        if job.rendezvous_id:
            pids = {}
            for uid in job.workers:
                pid = Workspace.of(self.agent.workloads_dir, uid).child_pid()
                if pid is not None:
                    pids[pid] = uid
            for number, members in self.hosts.rounds(files, job.rendezvous_id, job.round):
                uids = [pids.get(int(m[1])) for m in members]
                if None in uids:
                    break  # a worker's pid file not read yet: next time
                await self.bus.publish(
                    subjects.job_rendezvous(job.name),
                    job_pb2.RendezvousRound(name=job.name, namespace=job.namespace, round=number,
                                            members=sorted(u for u in uids if u), source=self.source,
                                            rendezvous_id=job.rendezvous_id),
                    msg_id=f"rdzv.{job.namespace}.{job.name}.{job.rendezvous_id}.{number}")
                job.round = number
        newest = self._newest_step(job)
        if newest is not None and newest[0] > job.step:
            job.step = newest[0]
            report = job_pb2.StepReport(name=job.name, namespace=job.namespace, step=newest[0],
                                        step_seconds=newest[1])
            report.observed_at.GetCurrentTime()
            await self.bus.publish(subjects.job_step(job.name), report)

    def _newest_step(self, job: _Job) -> tuple[int, float] | None:
        best = None
        for uid in job.workers:
            try:
                step, seconds = (Workspace.of(self.agent.workloads_dir, uid).path / "progress"
                                 ).read_text().split()[:2]
                found = (int(step), float(seconds))
            except (OSError, ValueError):
                continue
            if found[1] > 0 and (best is None or found[0] > best[0]):
                best = found
        return best
