"""Worker plans carried out by the local agent: a plan that a newer one already supersedes
starts nothing (a real nats-server with JetStream, the agent in-process, a real rendezvous
host under the job's torch)."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from pathlib import Path

import pytest
from la_support import StandInScheduler, start_agent

from alnair.v1 import job_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, subjects
from alnair_common.bus import ensure_streams
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_lifecycle import JOB_LABEL, RENDEZVOUS_LABEL
from alnair_local_agent._job_files import JobFiles
from alnair_local_agent._rendezvous import RendezvousHosts
from alnair_local_agent._workspace import recorded_process, still_running


def plan(generation: int, gang: str, target: int) -> job_pb2.WorkerPlan:
    spec = job_pb2.JobSpec(name="j1", namespace="default", command=["sleep", "60"],
                                   min_replicas=1, max_replicas=2)
    spec.replica_request.memory_gib = 1
    spec.replica_request.compute_percent = 10
    return job_pb2.WorkerPlan(spec=spec, generation=generation, rendezvous_id=gang, target=target,
                              phase=job_pb2.JOB_PHASE_SCHEDULING)


@pytest.mark.timeout(120)
async def test_a_plan_superseded_before_it_is_carried_out_starts_no_worker_and_no_host(
        nats_server: NatsServer, bus: Bus, tmp_path: Path) -> None:
    """The controller restarted the job as a new gang (g2) before the agent got to the plan
    that replaced a worker of the old one (g1): the agent used to start g1's rendezvous host
    (seconds) and worker, then stop both for g2. Now g1's plan, whose newer plan already waits
    in the stream, creates nothing; g2's creates its worker."""
    data = tmp_path / "data"
    files = JobFiles.of(data / "jobs", "default", "j1")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
    files.write_submission({**os.environ, "PATH": path}, str(tmp_path))
    await ensure_streams(bus)
    await bus.publish(subjects.job_workers("j1"), plan(1, "g1", 1))
    await bus.publish(subjects.job_workers("j1"), plan(2, "g2", 1))
    created: list[wl.Workload] = []

    async def on_event(_s: str, e: wl.WorkloadEvent) -> None:
        w = e.workload
        if w.labels.get(JOB_LABEL) == "j1" and w.phase == wl.WORKLOAD_PHASE_PENDING:
            created.append(w)

    await bus.subscribe(subjects.workload_events(), wl.WorkloadEvent, on_event)
    scheduler = StandInScheduler(bus, hold=True)  # the workers stay pending: nothing runs
    await scheduler.start()
    agent = await start_agent(nats_server.url, data)
    try:
        async def plan_2_applied() -> bool:
            return files.applied() == 2 and len(created) >= 1

        await wait_for(plan_2_applied, timeout=90, what="plan 2 carried out")
        gangs = [w.labels[RENDEZVOUS_LABEL] for w in created]
        assert gangs == ["g2"], f"workers created per gang: {gangs} (g1's plan was superseded)"
        assert files.rendezvous_ids() == ["g2"], (
            f"rendezvous hosts started: {files.rendezvous_ids()}; g1's plan must start none")
    finally:
        await agent.stop()
        RendezvousHosts().stop(files)

        async def hosts_gone() -> bool:  # reaped by this loop's child watcher
            await asyncio.sleep(0.05)
            return not any(still_running(*p) for rid in files.rendezvous_ids()
                           if (p := recorded_process(files.rendezvous(rid) / "pid")) is not None)

        await wait_for(hosts_gone, timeout=30, what="the rendezvous host stopped")
        await asyncio.sleep(0.2)  # its exit reaches the subprocess transport of this loop
        gc.collect()  # a transport left open warns here, in this test, not in the next one
