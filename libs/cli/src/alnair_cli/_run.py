"""``alnair run``: submit a local workload, wait for its card, run it, stream its output.

The command is run by the local agent (not by this process), exactly as a pod would be
started on a GPU node; this process shows what happens (pending and why, bound, running),
streams the workload's output from its workspace, forwards Ctrl-C/SIGTERM to the workload's
process group, and exits with the workload's exit code. Ctrl-C while still pending
withdraws the submission.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alnair.v1 import common_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, PermanentError, TemporaryError, subjects
from alnair_lifecycle import TERMINAL, LifecyclePublisher, phase_name

from ._workloads import active_with_name, all_workloads, workspace

P = wl.WorkloadPhase
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_]{0,61}[a-z0-9])?$")
_NOT_FORWARDED = ("ALNAIR_", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD")
MAX_GPU_MEMORY_GIB = 4096
"""More than any one GPU holds; a request above it is a typo, not a placement to wait for."""
AGENT_TIMEOUT = 15.0
"""Seconds to wait for the local agent to acknowledge a submission (its pending event)."""


class RunError(PermanentError):
    """Bad input or an impossible request; the message says what to change. Exit 2."""


@dataclass(frozen=True)
class RunRequest:
    command: list[str]
    memory_gib: int
    compute_percent: int
    name: str
    uid: str

    @classmethod
    def build(cls, command: list[str], memory_gib: int, compute_percent: int,
              name: str | None) -> RunRequest:
        if not command or not command[0].strip():
            raise RunError("no command given: write it after `--`, e.g. "
                           "`alnair run --gpu-memory 8 -- python train.py`")
        if not 1 <= compute_percent <= 100:
            raise RunError(f"--gpu-compute {compute_percent}: the compute share is a percent "
                           "of one GPU, 1..100")
        if not 0 <= memory_gib <= MAX_GPU_MEMORY_GIB:
            raise RunError(f"--gpu-memory {memory_gib}: GiB of one GPU, 0..{MAX_GPU_MEMORY_GIB} "
                           "(0 asks for no memory limit)")
        uid = uuid.uuid4().hex
        if name is None:
            base = re.sub(r"[^a-z0-9_-]+", "-", Path(command[0]).name.lower()).strip("-_")
            name = f"{base[:50] or 'job'}-{uid[:6]}"
        if not _NAME.match(name):
            raise RunError(f"--name {name!r}: use lower-case letters, digits, '-' or '_' "
                           "(1-63 characters, starting and ending with a letter or digit)")
        return cls(command, memory_gib, compute_percent, name, uid)

    def to_proto(self, *, phase: int = P.WORKLOAD_PHASE_PENDING) -> wl.Workload:
        w = wl.Workload(
            ref=common_pb2.WorkloadRef(uid=self.uid, name=self.name, namespace="local",
                                       mode=common_pb2.MODE_LOCAL),
            request=common_pb2.GpuRequest(memory_gib=self.memory_gib,
                                          compute_percent=self.compute_percent),
            scheduler_name="alnair-scheduler", phase=phase, command=self.command,
            working_dir=os.getcwd())
        w.created_at.GetCurrentTime()
        return w

    @staticmethod
    def environment() -> dict[str, str]:
        """The shell's environment the workload starts with (the agent sets the rest)."""
        return {k: v for k, v in os.environ.items() if not k.startswith(_NOT_FORWARDED)}


class Runner:
    def __init__(self, bus: Bus, data_dir: Path, request: RunRequest,
                 say: Callable[[str], None]) -> None:
        self.bus = bus
        self.data_dir = data_dir
        self.request = request
        self.say = say
        self.workspace = workspace(data_dir, request.uid)
        self.phase = P.WORKLOAD_PHASE_UNSPECIFIED
        self.final: wl.Workload | None = None
        self.changed = asyncio.Event()
        self._reasons: set[str] = set()
        self.impossible = False
        self._offset = 0
        self._bus_away = False

    async def run(self, *, wait_timeout: float | None = None) -> int:
        if active_with_name(await all_workloads(self.bus), self.request.name):
            raise RunError(f"a workload named {self.request.name!r} is still active; choose "
                           "another --name or wait for it to finish")
        self.records = await LifecyclePublisher.open(self.bus, "cli")
        await self.bus.subscribe(subjects.workload_events(), wl.WorkloadEvent, self._on_event)
        await self.bus.subscribe(subjects.sched_failed(), scheduling_pb2.SchedulingFailure,
                                 self._on_failure)
        await self.bus.subscribe(subjects.sched_bound(), scheduling_pb2.BindResult,
                                 self._on_bound)
        # Handlers go in before the submission: a Ctrl-C that lands as soon as the workload
        # is pending must withdraw it, not kill this process and leave the workload behind.
        loop = asyncio.get_running_loop()
        interrupted: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda s=sig: self._forward(s, interrupted))
        # The environment goes through the workspace, never the bus (secrets live there).
        self.workspace.write_environment(self.request.environment())
        await self.bus.publish(subjects.workload_submit(), self.request.to_proto(),
                               msg_id=f"submit:{self.request.uid}")
        self.say(f"submitted {self.request.name} ({self.request.uid[:8]}): "
                 f"{self.request.memory_gib} GiB, {self.request.compute_percent} % of a GPU")
        deadline = None if wait_timeout is None else loop.time() + wait_timeout
        next_poll = loop.time() + 1.0
        unanswered = loop.time() + AGENT_TIMEOUT
        try:
            while self.final is None:
                if interrupted and self.phase in (P.WORKLOAD_PHASE_UNSPECIFIED,
                                                  P.WORKLOAD_PHASE_PENDING):
                    await self._withdraw()
                    return 128 + interrupted[0]
                if self.phase == P.WORKLOAD_PHASE_UNSPECIFIED and loop.time() > unanswered:
                    self.say(f"no local agent took the submission within {AGENT_TIMEOUT:g} s: "
                             "is `alnair up` running on this machine?")
                    await self._withdraw()
                    return 1
                if self.impossible and self.phase < P.WORKLOAD_PHASE_BOUND:
                    await self._withdraw()  # the scheduler says retrying cannot help
                    return 1
                if deadline is not None and self.phase < P.WORKLOAD_PHASE_BOUND \
                        and loop.time() > deadline:
                    self.say(f"no placement within {wait_timeout:g} s")
                    await self._withdraw()
                    return 1
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), 0.05)
                except TimeoutError:
                    if loop.time() >= next_poll:
                        next_poll = loop.time() + 1.0
                        await self._poll_record()
                self._pump_output()
            self._pump_output()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        w = self.final
        if w.phase == P.WORKLOAD_PHASE_SUCCEEDED:
            return 0
        if w.HasField("exit_code"):
            if w.exit_code != 0 and not (interrupted and w.exit_code >= 128):
                # The agent's reason when it knows more than the code (an MPS fault's culprit).
                self.say(f"{w.ref.name} {w.message or f'exited with code {w.exit_code}'}")
            return w.exit_code
        self.say(f"{w.ref.name} {phase_name(w.phase)}: {w.message}")
        return 1

    async def _on_event(self, _s: str, e: wl.WorkloadEvent) -> None:
        if e.workload.ref.uid == self.request.uid:
            self._advance(e.workload)

    async def _poll_record(self) -> None:
        """Core subscriptions can miss a message across a reconnect; the record cannot.

        While the bus is away there is nothing to read: wait for it (the workload runs on,
        its agent publishes what happened once the bus is back) instead of giving up.
        """
        try:
            last = await self.records.last(self.request.uid)
        except TemporaryError as e:
            if not self._bus_away:
                self.say(f"the bus is unavailable ({e}); waiting for it to come back")
            self._bus_away = True
            return
        if self._bus_away:
            self.say("the bus is back")
            self._bus_away = False
        if last is not None:
            self._advance(last.workload)

    def _advance(self, w: wl.Workload) -> None:
        if w.phase <= self.phase and w.phase not in TERMINAL:
            return
        if w.phase == self.phase:
            return
        self.phase = w.phase
        if w.phase == P.WORKLOAD_PHASE_PENDING:
            self.say(f"pending: {w.message or 'waiting for the scheduler'}")
        elif w.phase == P.WORKLOAD_PHASE_BOUND:
            a = w.assignment
            self.say(f"bound to GPU {a.gpu_index} ({a.gpu_uuid}) on {w.node}: "
                     f"{a.memory_gib} GiB, {a.compute_percent} %")
        elif w.phase == P.WORKLOAD_PHASE_RUNNING:
            self.say(f"running {w.message}".rstrip())
        elif w.phase in TERMINAL:
            self.final = w
        self.changed.set()

    async def _on_failure(self, _s: str, f: scheduling_pb2.SchedulingFailure) -> None:
        if f.workload.uid == self.request.uid and f.reason not in self._reasons:
            self._reasons.add(f.reason)
            self.say(f"pending: {f.reason}" + (" (cannot be placed)" if f.permanent else ""))
            if f.permanent:
                self.impossible = True
                self.changed.set()

    async def _on_bound(self, _s: str, r: scheduling_pb2.BindResult) -> None:
        if r.workload.uid == self.request.uid and not r.ok:
            self.say(f"placement failed: {r.reason}")

    def _forward(self, sig: int, interrupted: list[int]) -> None:
        interrupted.append(sig)
        process = self.workspace.process()
        if process is not None and self.phase == P.WORKLOAD_PHASE_RUNNING:
            try:
                os.killpg(process[0], sig)
            except (ProcessLookupError, PermissionError):
                pass
        self.changed.set()

    async def _withdraw(self) -> None:
        await self.bus.publish(subjects.workload_submit(),
                               self.request.to_proto(phase=P.WORKLOAD_PHASE_DELETED),
                               msg_id=f"withdraw:{self.request.uid}")
        self.say(f"withdrawn {self.request.name} before it started")

    def _pump_output(self) -> None:
        try:
            with open(self.workspace.output, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        if data:
            self._offset += len(data)
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
