"""Forged bind decisions: the local agent starts a workload only on a committed share.

The attack (found before the bus authenticated): a BindDecision published by someone other
than the scheduler put an 80 GiB workload on an 80 GiB card that already held 80 GiB; the
agent checked only that the card exists and the size fits one card. The server now lets
only the scheduler publish decisions; the agent also checks each decision against
``gpu_allocations`` (where the scheduler commits before it decides). A refused decision is
answered not ok, counted, logged and terminated, and the workload it names stays pending —
the scheduler's real decision then starts it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from la_support import SIM_GPU0, alnair, decision, events_of
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from alnair.v1 import common_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, subjects
from alnair_common.bus import decode
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import commit_share, publish_decision, release_share

REFUSED = "alnair_local_agent_bind_decisions_refused_total"
P = wl.WorkloadPhase


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value(REFUSED, {"reason": reason}) or 0.0


async def submit(nats_server: NatsServer, tmp_path: Path, bus: Bus, name: str, memory_gib: int
                 ) -> tuple[asyncio.subprocess.Process, wl.Workload]:
    """`alnair run` a workload the stand-in scheduler holds back; it and its pending state."""
    proc = await asyncio.create_subprocess_exec(
        *alnair("run", "--nats-url", nats_server.url, "--data-dir", str(tmp_path / "data"),
                "--name", name, "--gpu-memory", str(memory_gib), "--gpu-compute", "20", "--",
                "true"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def pending() -> list[wl.WorkloadEvent]:
        return [e for e in await events_of(bus, name) if e.workload.phase == P.WORKLOAD_PHASE_PENDING]

    [event] = await wait_for(pending, timeout=30, what=f"{name} pending")
    return proc, event.workload


async def answers(bus: Bus, uid: str) -> list[scheduling_pb2.BindResult]:
    info = await bus.js.stream_info("SCHEDULING")
    found = []
    for seq in range(max(1, info.state.first_seq), info.state.last_seq + 1):
        msg = await bus.js.get_msg("SCHEDULING", seq)
        if msg.subject == subjects.sched_bound():
            result = decode(msg.subject, msg.data, scheduling_pb2.BindResult)
            if result.workload.uid == uid:
                found.append(result)
    return found


async def counted(reason: str, before: float) -> None:
    async def probe() -> bool:
        return refused(reason) > before

    await wait_for(probe, timeout=20, what=f"a decision refused for {reason}")


async def refused_and_still_pending(bus: Bus, tmp_path: Path, w: wl.Workload, reason: str,
                                    before: float, logs: list[dict]) -> scheduling_pb2.BindResult:
    await counted(reason, before)
    [answer] = await wait_for(lambda: answers(bus, w.ref.uid), timeout=10, what="not-ok answer")
    assert not answer.ok and answer.reason
    phases = [e.workload.phase for e in await events_of(bus, w.ref.name)]
    assert phases == [P.WORKLOAD_PHASE_PENDING]  # neither started nor failed
    assert not (tmp_path / "data" / "workloads" / w.ref.uid / "pid").exists()
    [entry] = [e for e in logs if e["event"] == "bind decision refused"]
    assert (entry["reason"], entry["uid"]) == (reason, w.ref.uid)
    return answer


async def the_real_decision_starts_it(bus: Bus, proc: asyncio.subprocess.Process,
                                      w: wl.Workload) -> None:
    await publish_decision(bus, decision(w, SIM_GPU0))
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    phases = [e.workload.phase for e in await events_of(bus, w.ref.name)]
    assert phases == [P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING,
                      P.WORKLOAD_PHASE_SUCCEEDED]


async def test_forged_bind_decision_not_in_gpu_allocations_is_refused(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    scheduler.hold = True
    proc, w = await submit(nats_server, tmp_path, bus, "victim", 80)
    with capture_logs() as logs:
        before = refused("not-committed")
        await bus.publish(subjects.sched_bind(), decision(w, SIM_GPU0))
        answer = await refused_and_still_pending(bus, tmp_path, w, "not-committed", before, logs)
    assert "no share of that card is committed in gpu_allocations" in answer.reason
    await the_real_decision_starts_it(bus, proc, w)


async def test_forged_bind_decision_with_other_amounts_than_committed_is_refused(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    scheduler.hold = True
    proc, w = await submit(nats_server, tmp_path, bus, "victim", 8)
    real = decision(w, SIM_GPU0)
    await commit_share(bus, real)
    forged = decision(w, SIM_GPU0)
    forged.assignment.memory_gib = 80
    with capture_logs() as logs:
        before = refused("wrong-share")
        await bus.publish(subjects.sched_bind(), forged)
        answer = await refused_and_still_pending(bus, tmp_path, w, "wrong-share", before, logs)
    assert "the committed share is 8 GiB and 20 %" in answer.reason
    await the_real_decision_starts_it(bus, proc, w)


async def test_bind_decision_for_a_card_that_would_be_over_capacity_is_refused(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    """The 160-GiB-on-80 attack: the card already holds 80 GiB and the decision adds 80 more.
    Refused whether the bucket's value says so itself or only the agent's own card does (a
    value that claims a 160 GiB capacity for the 80 GiB simulated card)."""
    scheduler.hold = True
    proc, w = await submit(nats_server, tmp_path, bus, "victim", 80)
    holder = scheduling_pb2.BindDecision(workload=common_pb2.WorkloadRef(
        uid="holder-uid", name="holder", namespace="local", mode=common_pb2.MODE_LOCAL))
    holder.assignment.CopyFrom(decision(w, SIM_GPU0).assignment)
    await commit_share(bus, holder)
    forged = decision(w, SIM_GPU0)
    for capacity in (80, 160):
        await commit_share(bus, forged, capacity_memory_gib=capacity, check_capacity=False)
        with capture_logs() as logs:
            before = refused("over-capacity")
            await bus.publish(subjects.sched_bind(), forged, msg_id=f"forged-{capacity}")
            await counted("over-capacity", before)
        [entry] = [e for e in logs if e["event"] == "bind decision refused"]
        assert entry["reason"] == "over-capacity"
        assert "160 GiB and 40 %, over its capacity of 80 GiB" in entry["detail"]
    phases = [e.workload.phase for e in await events_of(bus, "victim")]
    assert phases == [P.WORKLOAD_PHASE_PENDING]
    await release_share(bus, SIM_GPU0, "holder-uid")
    await the_real_decision_starts_it(bus, proc, w)

