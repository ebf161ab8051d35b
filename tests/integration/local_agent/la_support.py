"""Helpers of the local-agent tests: the agent in-process, a stand-in scheduler, the CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from alnair.v1 import common_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, subjects
from alnair_common.bus import decode
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import publish_decision, release_share
from alnair_local_agent import LocalAgentService, LocalAgentSettings

NODE = "test-node"
SIM_GPU0 = "GPU-sim-0000-80g"
REPO = Path(__file__).resolve().parents[3]


@dataclass
class RunningAgent:
    service: LocalAgentService
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.service.request_stop()
        await asyncio.wait_for(self.task, 30)


async def start_agent(nats_url: str, data_dir: Path, *, gpus: str = "sim:2x80",
                      interceptor: Path | None = None, **settings_: object) -> RunningAgent:
    settings = LocalAgentSettings(nats_url=nats_url, data_dir=data_dir, node_name=NODE,
                                  gpus=gpus, interceptor_lib=interceptor, **settings_)
    service = LocalAgentService(settings)
    task = asyncio.create_task(service.run())

    async def ready() -> bool:
        if task.done():
            task.result()
        return service.ready.is_set()

    await wait_for(ready, timeout=20, what="local agent ready")
    return RunningAgent(service, task)


ENDED = (wl.WORKLOAD_PHASE_SUCCEEDED, wl.WORKLOAD_PHASE_FAILED, wl.WORKLOAD_PHASE_DELETED)


@dataclass
class StandInScheduler:
    """Binds every pending local workload to ``gpu`` (what the scheduler will do): commits
    its share in ``gpu_allocations`` first, and releases it when the workload ends."""

    bus: Bus
    gpu: str = SIM_GPU0
    bound: list[str] = field(default_factory=list)
    hold: bool = False
    refuse: dict[str, str] = field(default_factory=dict)
    cards: dict[str, str] = field(default_factory=dict)  # uid -> the card it was bound to

    async def start(self) -> None:
        await self.bus.subscribe(subjects.workload_events(), wl.WorkloadEvent, self._on_event)

    async def _on_event(self, _s: str, e: wl.WorkloadEvent) -> None:
        w = e.workload
        if w.phase in ENDED and w.ref.uid in self.cards:
            await release_share(self.bus, self.cards.pop(w.ref.uid), w.ref.uid)
            return
        if self.hold or w.phase != wl.WORKLOAD_PHASE_PENDING or w.ref.uid in self.bound:
            return
        if w.ref.name in self.refuse:
            failure = scheduling_pb2.SchedulingFailure(workload=w.ref, permanent=True,
                                                       reason=self.refuse[w.ref.name])
            await self.bus.publish(subjects.sched_failed(), failure)
            return
        self.bound.append(w.ref.uid)
        self.cards[w.ref.uid] = self.gpu
        await publish_decision(self.bus, decision(w, self.gpu))


def decision(w: wl.Workload, gpu: str) -> scheduling_pb2.BindDecision:
    d = scheduling_pb2.BindDecision(workload=w.ref, scheduler="stand-in")
    d.assignment.CopyFrom(common_pb2.GpuAssignment(
        node=NODE, gpu_uuid=gpu, gpu_index=0, memory_gib=w.request.memory_gib,
        compute_percent=w.request.compute_percent))
    d.decided_at.GetCurrentTime()
    return d


def alnair(*args: str) -> list[str]:
    return [sys.executable, "-m", "alnair_cli", *args]


async def run_cli(args: list[str], *, cwd: Path | None = None, env: dict | None = None,
                  timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = await asyncio.create_subprocess_exec(
        *alnair(*args), cwd=cwd, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def events_of(bus: Bus, name: str) -> list[wl.WorkloadEvent]:
    info = await bus.js.stream_info("WORKLOADS")
    found: list[wl.WorkloadEvent] = []
    for seq in range(max(1, info.state.first_seq), info.state.last_seq + 1):
        msg = await bus.js.get_msg("WORKLOADS", seq)
        if msg.subject == subjects.workload_events():
            e = decode(msg.subject, msg.data, wl.WorkloadEvent)
            if e.workload.ref.name == name:
                found.append(e)
    return found
