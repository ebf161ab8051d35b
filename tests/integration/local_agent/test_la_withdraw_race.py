"""A withdrawal that meets the workload's bind: it runs, or it is withdrawn, never both.

Found on the H200 (issue #21's dry run): a training job shrank while one of its new workers
was being bound. The agent's bind had checked "pending" and was starting the process when the
worker plan withdrew it (also "pending" to it): the workload was reported deleted, its share
released, and its process trained on untracked, so the next workload was placed on a card
that it still used. The agent now carries out one transition of a workload at a time, and a
withdrawal that comes too late says so, so the job adapter stops the worker instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from la_support import SIM_GPU0, decision, events_of
from test_la_forged_binds import submit

from alnair.v1 import scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import commit_share

P = wl.WorkloadPhase


async def held_with_its_decision(bus: Bus, nats_server: NatsServer, scheduler,  # noqa: ANN001
                                 tmp_path: Path, name: str
                                 ) -> tuple[asyncio.subprocess.Process, wl.Workload, scheduling_pb2.BindDecision]:
    """A pending workload the stand-in scheduler holds back, and a decision for it whose
    share is committed (what the scheduler does before it decides): the agent would start it."""
    scheduler.hold = True
    proc, w = await submit(nats_server, tmp_path, bus, name, 8)
    d = decision(w, SIM_GPU0)
    await commit_share(bus, d)
    return proc, w, d


async def test_a_withdrawal_during_the_bind_comes_too_late_and_says_so(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    proc, w, d = await held_with_its_decision(bus, nats_server, scheduler, tmp_path, "raced")
    core = agent.service.agent
    # The bind starts first; the withdrawal arrives at its first wait, both having seen "pending".
    _, withdrawn = await asyncio.gather(core.on_bind("", d), core.withdraw(w))
    assert withdrawn is False, "withdrawn although its bind was under way"

    async def ended() -> list[int] | None:
        phases = [e.workload.phase for e in await events_of(bus, "raced")]
        return phases if P.WORKLOAD_PHASE_SUCCEEDED in phases else None

    phases = await wait_for(ended, timeout=30, what="the raced workload ran to its end")
    assert P.WORKLOAD_PHASE_DELETED not in phases, f"reported withdrawn and also run: {phases}"
    assert phases.index(P.WORKLOAD_PHASE_RUNNING) < phases.index(P.WORKLOAD_PHASE_SUCCEEDED)
    await asyncio.wait_for(proc.wait(), 30)


async def test_a_withdrawal_first_means_the_bind_starts_nothing(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    proc, w, d = await held_with_its_decision(bus, nats_server, scheduler, tmp_path, "gone")
    core = agent.service.agent
    withdrawn, _ = await asyncio.gather(core.withdraw(w), core.on_bind("", d))
    assert withdrawn is True
    phases = [e.workload.phase for e in await events_of(bus, "gone")]
    assert phases[-1] == P.WORKLOAD_PHASE_DELETED and P.WORKLOAD_PHASE_RUNNING not in phases, phases
    uid = w.ref.uid
    assert not (tmp_path / "data" / "workloads" / uid / "child.pid").exists(), "a withdrawn workload was started"
    proc.kill()
    await proc.wait()
