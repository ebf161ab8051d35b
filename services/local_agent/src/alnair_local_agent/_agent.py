"""The local agent's workloads: submitted → pending → bound → running → succeeded|failed.

Every transition goes through :class:`alnair_lifecycle.LifecyclePublisher`, the same as
pods', so brains cannot tell the modes apart. Workloads outlive the agent: each runs in its
own session under a reaper that records its exit code in the workspace. A restarted agent
finds its bound/running workloads again from the ``workload_states`` records: still running
→ watched until they end; ended → finished with the recorded exit code; gone without one →
failed with the reason. None is forgotten.

A bind decision is carried out only if the share it names is committed in ``gpu_allocations``
as decided (:mod:`alnair_common.allocations`); otherwise it is refused — answered not ok,
counted, terminated — and the workload it names stays pending: a decision the scheduler did
not make must not start it, nor fail it.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from datetime import UTC, datetime
from pathlib import Path

from alnair.v1 import common_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, PermanentError, TemporaryError, get_logger, publish_error, subjects
from alnair_common.allocations import UncommittedShareError, committed_shares
from alnair_common.annotations import SIMULATED_GPU as SIMULATED_ANNOTATION
from alnair_gpu import MpsDaemons, NodeGpus
from alnair_lifecycle import JOB_LABEL, PROGRESS_ENV, WORKER_ENV, LifecyclePublisher

from . import _metrics
from ._launcher import cuda_share, launch, workload_env
from ._submission import Submission
from ._workspace import Workspace, still_running

log = get_logger("alnair.local-agent")
P = wl.WorkloadPhase


class Agent:
    def __init__(self, bus: Bus, lifecycle: LifecyclePublisher, *, node: str, gpus: NodeGpus,
                 workloads_dir: Path, interceptor: Path | None, mps: MpsDaemons | None = None) -> None:
        self.bus = bus
        self.mps = mps
        self.running: dict[str, tuple[str, str]] = {}  # uid -> (name, GPU uuid) while it runs
        self.lifecycle = lifecycle
        self.node = node
        self.gpus = gpus
        self.workloads_dir = workloads_dir
        self.interceptor = interceptor
        self.watchers: dict[str, asyncio.Task[None]] = {}
        # One transition of a workload at a time: a withdrawal must not slip in while its bind
        # is being carried out (both look at its last phase, then act after awaiting).
        self._transitions: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def _transition(self, uid: str) -> asyncio.Lock:
        lock = self._transitions.get(uid)
        if lock is None:
            lock = self._transitions[uid] = asyncio.Lock()
        return lock

    # -- submissions ----------------------------------------------------------------------

    async def on_submit(self, _subject: str, workload: wl.Workload) -> None:
        if workload.phase == P.WORKLOAD_PHASE_DELETED:
            await self.withdraw(workload)
            return
        try:
            sub = Submission.from_proto(workload)
        except PermanentError as e:
            await self._reject(workload, str(e))
            return
        if await self.lifecycle.last(sub.uid) is not None:
            return  # a replayed submission
        Workspace.of(self.workloads_dir, sub.uid).create(workload)
        pending = self._public(workload, P.WORKLOAD_PHASE_PENDING,
                               "waiting for the scheduler's decision")
        pending.node = ""
        await self.lifecycle.publish(pending)

    async def withdraw(self, workload: wl.Workload) -> bool:
        """`alnair run` interrupted, or a worker no longer wanted, before it started: it will
        not run. False when it was no longer pending (bound or started meanwhile): the caller
        must stop it as a running workload."""
        async with self._transition(workload.ref.uid):
            last = await self.lifecycle.last(workload.ref.uid)
            if last is None or last.workload.phase != P.WORKLOAD_PHASE_PENDING:
                return False
            await self.lifecycle.publish(self._public(last.workload, P.WORKLOAD_PHASE_DELETED,
                                                      "withdrawn before it started"))
            return True

    async def _reject(self, workload: wl.Workload, reason: str) -> None:
        log.warning("submission rejected", name=workload.ref.name, reason=reason)
        await publish_error(self.bus, code="invalid-request", message=reason,
                            subject=subjects.workload_submit(), obj=workload.ref.uid)
        try:
            subjects.token(workload.ref.uid)
        except PermanentError:
            return  # no usable uid: the error event is all that can be said
        await self.lifecycle.publish(self._public(workload, P.WORKLOAD_PHASE_FAILED, reason))

    # -- bind decisions -------------------------------------------------------------------

    async def on_bind(self, _subject: str, d: scheduling_pb2.BindDecision) -> None:
        if d.workload.mode != common_pb2.MODE_LOCAL or d.assignment.node != self.node:
            return  # a pod's, or another machine's
        async with self._transition(d.workload.uid):
            await self._bind(d)

    async def _bind(self, d: scheduling_pb2.BindDecision) -> None:
        last = await self.lifecycle.last(d.workload.uid)
        workspace = Workspace.of(self.workloads_dir, d.workload.uid)
        submission = workspace.submission()
        if last is None and submission is not None:
            # The pending event is out but its record not yet written (we publish first):
            # the decision came quickly. Retry shortly instead of refusing it.
            raise TemporaryError(f"{d.workload.name}: pending record not written yet",
                                 retry_after=0.1)
        if last is None or submission is None:
            await self._answer(d, ok=False, reason=f"no workload {d.workload.uid} was submitted "
                                                   f"to the local agent on {self.node}")
            return
        if last.workload.phase == P.WORKLOAD_PHASE_DELETED:
            await self._answer(d, ok=False, reason=f"{d.workload.name} was withdrawn")
            return
        if last.workload.phase != P.WORKLOAD_PHASE_PENDING:
            # A replay: answer with what became of it (a start the agent did not survive
            # is not ok; a command that ran and exited was placed fine).
            never_ran = (last.workload.phase == P.WORKLOAD_PHASE_FAILED
                         and not last.workload.HasField("exit_code"))
            await self._answer(d, ok=not never_ran,
                               reason=last.workload.message if never_ran else "")
            return
        a = d.assignment
        await self._check_committed(d)
        problem = self._check_assignment(a)
        if problem:
            await self._answer(d, ok=False, reason=problem)
            await self.lifecycle.publish(self._public(submission, P.WORKLOAD_PHASE_FAILED,
                                                      problem))
            return
        bound = self._public(submission, P.WORKLOAD_PHASE_BOUND, "")
        bound.node = self.node
        bound.assignment.CopyFrom(a)
        if self.gpus.simulated:  # carried by every later event, shown by `alnair ps`
            bound.annotations[SIMULATED_ANNOTATION] = "true"
        share = cuda_share(a, d.workload.uid, self.mps.pipe_directory(a.gpu_uuid) if self.mps else "")
        workspace.write_limits(share)
        await self.lifecycle.publish(bound)
        env = workload_env(self._environment(submission, workspace), share,
                           workspace=workspace, interceptor=self.interceptor)
        if JOB_LABEL in submission.labels:  # a training job's worker reports its steps there
            env.update({**WORKER_ENV, **workspace.worker_environment()})
            env[PROGRESS_ENV] = str(workspace.path / "progress")
        try:
            process = await launch(submission, env, workspace)
        except OSError as e:
            reason = f"cannot start {submission.command[0]!r}: {e}"
            await self._answer(d, ok=False, reason=reason)
            await self.lifecycle.publish(self._public(bound, P.WORKLOAD_PHASE_FAILED, reason))
            return
        workspace.record_process(process.pid)
        self.running[d.workload.uid] = (d.workload.name, a.gpu_uuid)
        running = self._public(bound, P.WORKLOAD_PHASE_RUNNING, self._running_note(a.gpu_uuid))
        running.started_at.FromDatetime(datetime.now(UTC))
        await self.lifecycle.publish(running)
        await self._answer(d, ok=True, reason="")
        self.watchers[d.workload.uid] = asyncio.create_task(
            self._await_child(running, process, workspace), name=f"workload-{d.workload.name}")

    async def _check_committed(self, d: scheduling_pb2.BindDecision) -> None:
        """Refuse a decision whose share ``gpu_allocations`` does not hold as decided: answer
        not ok and raise, so the consumer terminates it (the workload stays pending)."""
        gpu = self.gpus.by_uuid(d.assignment.gpu_uuid)
        reader = await committed_shares(self.bus)
        try:
            await reader.check(d.workload, d.assignment,
                               card_memory_gib=gpu.memory_gib if gpu is not None else None)
        except UncommittedShareError as e:
            _metrics.BINDS_REFUSED.labels(e.reason).inc()
            log.warning("bind decision refused", reason=e.reason, workload=d.workload.name,
                        uid=d.workload.uid, gpu=d.assignment.gpu_uuid, detail=str(e))
            # Its own message id: JetStream must not drop the real decision's answer (same
            # workload and node) as a duplicate of this one.
            a = d.assignment
            await self._answer(d, ok=False, reason=str(e), msg_id=(
                f"refused:{d.workload.uid}:{a.node}:{a.gpu_uuid}:{a.memory_gib}:{a.compute_percent}"))
            raise

    def _check_assignment(self, a: common_pb2.GpuAssignment) -> str:
        gpu = self.gpus.by_uuid(a.gpu_uuid)
        if gpu is None:
            known = ", ".join(g.uuid for g in self.gpus.gpus) or "none"
            return f"unknown GPU {a.gpu_uuid!r} on {self.node} (this node has: {known})"
        if not 1 <= a.compute_percent <= 100:
            return f"compute {a.compute_percent} % is outside 1..100"
        if a.memory_gib > gpu.memory_gib:
            return (f"{a.memory_gib} GiB requested on {a.gpu_uuid}, which has "
                    f"{gpu.memory_gib} GiB")
        if not self.gpus.simulated and self.interceptor is None:
            return ("real GPU but no interceptor: build it (make -C native/cuda_intercept) and "
                    "set ALNAIR_INTERCEPTOR_LIB to libalnair_cuda.so, or the limits would not "
                    "be enforced")
        return ""

    def _running_note(self, gpu_uuid: str) -> str:
        if not self.gpus.simulated:
            return f"on {gpu_uuid}"
        if self.interceptor is None:
            return (f"on SIMULATED GPU {gpu_uuid}; no interceptor loaded "
                    "(ALNAIR_INTERCEPTOR_LIB unset): limits are not enforced")
        return f"on SIMULATED GPU {gpu_uuid}; interceptor {self.interceptor} preloaded"

    async def _answer(self, d: scheduling_pb2.BindDecision, *, ok: bool, reason: str,
                      msg_id: str | None = None) -> None:
        if not ok:
            log.warning("bind failed", workload=d.workload.name, reason=reason)
        await self.bus.publish(
            subjects.sched_bound(),
            scheduling_pb2.BindResult(workload=d.workload, ok=ok, reason=reason,
                                      assignment=d.assignment),
            msg_id=msg_id or f"bound:{d.workload.uid}:{d.assignment.node}:{int(ok)}")

    # -- running and finished -------------------------------------------------------------

    async def _await_child(self, running: wl.Workload, process: asyncio.subprocess.Process,
                           workspace: Workspace) -> None:
        returncode = await process.wait()
        code = workspace.exit_code()
        await self._finish(running, returncode if code is None else code, "")

    async def _watch_adopted(self, running: wl.Workload, workspace: Workspace, pid: int,
                             started: str) -> None:
        await _process_exit(pid, started)
        code = workspace.exit_code()
        if code is None:
            await self._finish(running, None, f"process {pid} ended without an exit code "
                                              "(its reaper was killed too)")
        else:
            await self._finish(running, code, "")

    def running_on(self, gpu_uuid: str) -> list[str]:
        """Names of the workloads running on this card (an MPS server fault ends them all)."""
        return sorted(name for name, gpu in self.running.values() if gpu == gpu_uuid)

    async def _finish(self, running: wl.Workload, code: int | None, reason: str) -> None:
        placed = self.running.pop(running.ref.uid, None)
        ok = code == 0
        if not ok and not reason and placed is not None:
            reason = self._mps_fault_reason(running.ref.uid, placed[1], code)
        done = self._public(running, P.WORKLOAD_PHASE_SUCCEEDED if ok else P.WORKLOAD_PHASE_FAILED,
                            reason or ("" if ok else f"exited with code {code}"))
        if code is not None:
            done.exit_code = code
        usage = Workspace.of(self.workloads_dir, running.ref.uid).usage()
        if usage is not None:
            done.usage.CopyFrom(usage)
        done.finished_at.FromDatetime(datetime.now(UTC))
        await self.lifecycle.publish(done)

    def _mps_fault_reason(self, uid: str, gpu_uuid: str, code: int | None) -> str:
        """Why a workload on an MPS card failed, when the card's MPS server logged a fatal GPU
        fault that tore its process down, naming the other workloads it ended ("" if none)."""
        pid = Workspace.of(self.workloads_dir, uid).child_pid()
        fault = self.mps.fault_of(gpu_uuid, pid) if self.mps and pid else None
        if fault is None:
            return ""
        names = self._names_of(set(fault.torn_down))
        others = sorted(names.get(p, f"pid {p}") for p in fault.torn_down if p != pid)
        if not others:
            return f"exited with code {code} after a fatal GPU fault in its CUDA contexts (MPS server log)"
        return (f"exited with code {code}: a fatal GPU fault on its GPU's MPS server ended the CUDA "
                f"contexts of this workload and of {', '.join(others)} (MPS clients of one GPU share "
                "its faults; the server's log does not say which client faulted); run workloads that "
                "must be isolated from their neighbours' faults without --mps")

    def _names_of(self, pids: set[int]) -> dict[int, str]:
        """Workload names of these command pids, from the workspaces (finished ones too)."""
        found: dict[int, str] = {}
        for path in self.workloads_dir.iterdir() if self.workloads_dir.is_dir() else ():
            space = Workspace.of(self.workloads_dir, path.name)
            pid = space.child_pid()
            if pid in pids and (sub := space.submission()) is not None:
                found[pid] = f"workload {sub.ref.name!r}"
        return found

    async def recover(self) -> int:
        """Find this node's bound and running workloads again; return how many were found."""
        found = 0
        for last in await self.lifecycle.states():
            w = last.workload
            if (w.ref.mode != common_pb2.MODE_LOCAL or w.node != self.node
                    or w.phase not in (P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING)):
                continue
            found += 1
            workspace = Workspace.of(self.workloads_dir, w.ref.uid)
            process = workspace.process()
            running = self._public(w, P.WORKLOAD_PHASE_RUNNING, w.message)
            if process is not None and still_running(*process):
                log.info("running workload found again", name=w.ref.name, pid=process[0])
                self.running[w.ref.uid] = (w.ref.name, w.assignment.gpu_uuid)
                await self.lifecycle.publish(running)  # if it was only bound
                self.watchers[w.ref.uid] = asyncio.create_task(
                    self._watch_adopted(running, workspace, *process))
                continue
            code = workspace.exit_code()
            if code is not None:
                await self._finish(running, code, "")
            else:
                await self._finish(running, None, "the agent restarted and the workload's "
                                   "process is gone without an exit code")
        return found

    async def stop(self) -> None:
        """Stop watching; the workloads themselves keep running (a successor adopts them)."""
        for task in self.watchers.values():
            task.cancel()
        await asyncio.gather(*self.watchers.values(), return_exceptions=True)

    def _environment(self, submission: wl.Workload, workspace: Workspace) -> dict[str, str]:
        """The submitter's environment: the workspace's copy (``alnair run``), else the one an
        older client sent on the bus, else the agent's own."""
        env = workspace.environment()
        if env is not None:
            return env
        if submission.environment:
            return dict(submission.environment)
        log.warning("no submitter environment in the workspace; the agent's own is used",
                    workload=submission.ref.uid, workspace=str(workspace.path))
        return dict(os.environ)

    def _public(self, base: wl.Workload, phase: int, message: str) -> wl.Workload:
        out = wl.Workload()
        out.CopyFrom(base)
        out.ClearField("environment")
        out.phase = phase
        out.message = message
        if not out.node and phase != P.WORKLOAD_PHASE_PENDING:
            out.node = self.node
        return out


async def _process_exit(pid: int, started: str) -> None:
    """Wait for a process that is not our child (adopted after a restart): a pidfd becomes
    readable when it exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if not still_running(pid, started):  # the pid was reused before we opened it
            return
        ended = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(fd, ended.set)
        try:
            await ended.wait()
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)
