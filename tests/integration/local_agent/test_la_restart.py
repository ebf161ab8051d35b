"""A restarted local agent finds its running workloads again, or reports them failed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from la_support import alnair, events_of, run_cli, start_agent

from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for

P = wl.WorkloadPhase


def waiter(flag: Path, code: int) -> list[str]:
    script = (f"import os, sys, time\nprint('started', flush=True)\n"
              f"while not os.path.exists({str(flag)!r}): time.sleep(0.05)\nsys.exit({code})\n")
    return ["python", "-c", script]


async def test_agent_restart_adopts_running_workloads_and_fails_lost_ones(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path,
        interceptor_lib: Path) -> None:
    data_dir = tmp_path / "data"
    flag = tmp_path / "go"
    runs = {}
    for name, code in (("survivor", 5), ("victim", 0)):
        runs[name] = await asyncio.create_subprocess_exec(
            *alnair("run", "--nats-url", nats_server.url, "--data-dir", str(data_dir), "--name",
                    name, "--", *waiter(flag, code)),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def both_running():
        phases = [(await events_of(bus, n))[-1:] for n in runs]
        return all(p and p[0].workload.phase == P.WORKLOAD_PHASE_RUNNING for p in phases)

    await wait_for(both_running, timeout=30, what="both running")
    await agent.stop()

    # While no agent runs: the victim's process group is killed outright (no exit code).
    victim_uid = (await events_of(bus, "victim"))[0].workload.ref.uid
    pid, _ = (data_dir / "workloads" / victim_uid / "pid").read_text().split()
    os.killpg(int(pid), signal.SIGKILL)

    successor = await start_agent(nats_server.url, data_dir, interceptor=interceptor_lib)
    try:
        victim_out, victim_err = await asyncio.wait_for(runs["victim"].communicate(), 30)
        assert runs["victim"].returncode == 1
        # Gone before the successor looked, or while it watched: failed either way.
        assert b"without an exit code" in victim_err
        flag.touch()
        out, err = await asyncio.wait_for(runs["survivor"].communicate(), 30)
        assert runs["survivor"].returncode == 5, err.decode()
        assert b"started" in out
    finally:
        await successor.stop()

    for name, final in (("survivor", P.WORKLOAD_PHASE_FAILED), ("victim", P.WORKLOAD_PHASE_FAILED)):
        events = await events_of(bus, name)
        assert [e.workload.phase for e in events] == [
            P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING, final]
        assert [e.sequence for e in events] == [1, 2, 3, 4]
    survivor = (await events_of(bus, "survivor"))[-1].workload
    assert survivor.exit_code == 5
    victim = (await events_of(bus, "victim"))[-1].workload
    assert not victim.HasField("exit_code")


async def test_ps_and_logs(bus: Bus, nats_server: NatsServer, agent, scheduler,
                           tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    common = ["--nats-url", nats_server.url, "--data-dir", str(data_dir)]
    done = await run_cli(["run", *common, "--name", "hello", "--gpu-memory", "4", "--",
                          "python", "-c", "print('line one'); print('line two')"])
    assert done.returncode == 0, done.stderr
    listed = await run_cli(["ps", *common, "--json"])
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["state"], row["memory_gib"], row["exit"]) == \
        ("hello", "succeeded", "4", "0")
    assert row["gpu"].endswith("(sim)")
    table = await run_cli(["ps", *common], env={"COLUMNS": "200"})
    assert "hello" in table.stdout and "succeeded" in table.stdout

    logs = await run_cli(["logs", *common, "hello"])
    assert logs.returncode == 0 and logs.stdout == "line one\nline two\n"
    follow = await run_cli(["logs", *common, "--follow", row["uid"]])
    assert follow.stdout == "line one\nline two\n"
    unknown = await run_cli(["logs", *common, "nobody"])
    assert unknown.returncode == 1 and "no workload named 'nobody'" in unknown.stderr
