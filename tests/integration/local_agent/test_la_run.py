"""`alnair run` against the local agent with a simulated inventory and a real nats-server.

A stand-in publishes the scheduler's BindDecisions (allowed until the scheduler lands).
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest
from la_support import NODE, SIM_GPU0, alnair, events_of, run_cli

from alnair.v1 import inventory_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, TypedKV, ensure_streams, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for

P = wl.WorkloadPhase
ENV_PROBE = ("import json, os; print(json.dumps({'cwd': os.getcwd(), **{k: os.environ.get(k) "
             "for k in ['CUDA_VISIBLE_DEVICES', 'LD_PRELOAD', 'ALNAIR_VGPU_MEMORY_BYTES', "
             "'ALNAIR_VGPU_COMPUTE_PERCENT', 'ALNAIR_WORKSPACE', 'ALNAIR_WORKLOAD_ID', "
             "'MY_SETTING', 'ALNAIR_SECRET_OF_CLI']}}))")


def cli_args(nats_server: NatsServer, data_dir: Path, *args: str) -> list[str]:
    return ["run", "--nats-url", nats_server.url, "--data-dir", str(data_dir), *args]


async def test_run_goes_pending_running_succeeded_with_the_device_plugin_environment(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path,
        interceptor_lib: Path) -> None:
    data_dir = tmp_path / "data"
    workdir = tmp_path / "project"
    workdir.mkdir()
    submitted: list[wl.Workload] = []

    async def on_submit(_subject: str, w: wl.Workload) -> None:
        submitted.append(w)

    await bus.subscribe(subjects.workload_submit(), wl.Workload, on_submit)
    done = await run_cli(cli_args(nats_server, data_dir, "--gpu-memory", "8", "--gpu-compute",
                                  "30", "--name", "envcheck", "--", "python", "-c", ENV_PROBE),
                         cwd=workdir, env={"MY_SETTING": "kept", "ALNAIR_SECRET_OF_CLI": "x"})
    assert done.returncode == 0, done.stderr
    # The shell's environment reached the command through the workspace, never the bus.
    assert submitted and all(not w.environment for w in submitted)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    [uid] = scheduler.bound
    workspace = data_dir / "workloads" / uid
    assert seen == {
        "cwd": str(workdir), "CUDA_VISIBLE_DEVICES": SIM_GPU0, "LD_PRELOAD": str(interceptor_lib),
        "ALNAIR_VGPU_MEMORY_BYTES": str(8 << 30), "ALNAIR_VGPU_COMPUTE_PERCENT": "30",
        "ALNAIR_WORKSPACE": str(workspace), "ALNAIR_WORKLOAD_ID": uid,
        "MY_SETTING": "kept", "ALNAIR_SECRET_OF_CLI": None,
    }
    env_file = workspace / "environment.json"
    assert json.loads(env_file.read_text())["MY_SETTING"] == "kept"
    assert env_file.stat().st_mode & 0o077 == 0  # the submitter's secrets: owner only
    limits = (workspace / "limits").read_text()
    assert f"memory_bytes = {8 << 30}" in limits and "compute_percent = 30" in limits
    assert f"workload_id = {uid}" in limits
    assert "pending" in done.stderr and "bound to GPU 0" in done.stderr
    assert "SIMULATED" in done.stderr

    events = await events_of(bus, "envcheck")
    assert [e.workload.phase for e in events] == [
        P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING,
        P.WORKLOAD_PHASE_SUCCEEDED]
    assert [e.sequence for e in events] == [1, 2, 3, 4]
    final = events[-1].workload
    assert final.exit_code == 0 and final.node == NODE and final.assignment.gpu_uuid == SIM_GPU0
    assert all(not e.workload.environment for e in events)  # the environment never leaves
    assert events[0].source.startswith("local-agent@")


async def test_exit_codes_propagate(bus: Bus, nats_server: NatsServer, agent, scheduler,
                                    tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    three = await run_cli(cli_args(nats_server, data_dir, "--name", "three", "--",
                                   "python", "-c", "import sys; print('bye'); sys.exit(3)"))
    assert three.returncode == 3 and "bye" in three.stdout
    assert "exited with code 3" in three.stderr
    [*_, failed] = await events_of(bus, "three")
    assert failed.workload.phase == P.WORKLOAD_PHASE_FAILED and failed.workload.exit_code == 3

    missing = await run_cli(cli_args(nats_server, data_dir, "--name", "nosuch", "--",
                                     "/nonexistent/program"))
    assert missing.returncode == 127
    assert "cannot start '/nonexistent/program'" in missing.stdout + missing.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_ctrl_c_reaches_the_workload(bus: Bus, nats_server: NatsServer, agent, scheduler,
                                           tmp_path: Path, sig: signal.Signals) -> None:
    script = ("import signal, sys, time\n"
              f"def stop(*_):\n    print('child got {sig.name}', flush=True); sys.exit(42)\n"
              f"signal.signal(signal.{sig.name}, stop)\nprint('ready', flush=True)\n"
              "time.sleep(60)\nsys.exit(9)\n")
    proc = await asyncio.create_subprocess_exec(
        *alnair(*cli_args(nats_server, tmp_path / "data", "--name", "sleeper", "--",
                          "python", "-c", script)),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line == b"ready\n"
    proc.send_signal(sig)
    rest, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 42, err.decode()
    assert f"child got {sig.name}".encode() in rest
    [*_, final] = await events_of(bus, "sleeper")
    assert final.workload.exit_code == 42


async def test_bad_input_is_refused_with_a_clear_error(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    too_much = await run_cli(cli_args(nats_server, data_dir, "--gpu-compute", "250", "--",
                                      "true"))
    assert too_much.returncode == 2 and "--gpu-compute 250" in too_much.stderr
    assert "1..100" in too_much.stderr
    empty = await run_cli(cli_args(nats_server, data_dir))
    assert empty.returncode == 2 and "no command given" in empty.stderr
    bad_name = await run_cli(cli_args(nats_server, data_dir, "--name", "Bad Name", "--", "true"))
    assert bad_name.returncode == 2 and "--name 'Bad Name'" in bad_name.stderr

    scheduler.gpu = "GPU-does-not-exist"
    unknown = await run_cli(cli_args(nats_server, data_dir, "--name", "lost", "--", "true"))
    assert unknown.returncode == 1
    assert "unknown GPU 'GPU-does-not-exist'" in unknown.stderr and SIM_GPU0 in unknown.stderr
    [*_, failed] = await events_of(bus, "lost")
    assert failed.workload.phase == P.WORKLOAD_PHASE_FAILED


async def test_pending_shows_why_and_ctrl_c_withdraws(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    scheduler.hold = True
    proc = await asyncio.create_subprocess_exec(
        *alnair(*cli_args(nats_server, tmp_path / "data", "--name", "waiting", "--", "true")),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def pending():
        return [e for e in await events_of(bus, "waiting")
                if e.workload.phase == P.WORKLOAD_PHASE_PENDING]

    await wait_for(pending, timeout=30, what="pending")
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 128 + signal.SIGINT
    assert b"withdrawn" in err

    async def deleted():
        events = await events_of(bus, "waiting")
        return events if events[-1].workload.phase == P.WORKLOAD_PHASE_DELETED else None

    await wait_for(deleted, timeout=10, what="withdrawn workload deleted")


async def test_inventory_is_published_and_marked_simulated(bus: Bus, agent) -> None:
    kv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
    found = await kv.get(NODE)
    assert found is not None
    inventory = found.value
    assert inventory.simulated and inventory.node == NODE
    assert [g.uuid for g in inventory.gpus] == [SIM_GPU0, "GPU-sim-0001-80g"]
    assert all(g.vgpu_memory_gib == 80 and g.vgpu_compute_percent == 100 for g in inventory.gpus)


async def test_impossible_request_ends_the_run_with_the_schedulers_reason(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    scheduler.refuse["huge"] = "100 GiB requested, but the largest card has 80 GiB"
    done = await run_cli(cli_args(nats_server, tmp_path / "data", "--name", "huge",
                                  "--gpu-memory", "100", "--", "true"))
    assert done.returncode == 1
    assert "the largest card has 80 GiB (cannot be placed)" in done.stderr
    assert "withdrawn" in done.stderr

    async def deleted():
        events = await events_of(bus, "huge")
        return events if events[-1].workload.phase == P.WORKLOAD_PHASE_DELETED else None

    await wait_for(deleted, timeout=10, what="impossible workload withdrawn")


async def test_run_without_a_local_agent_says_so(bus: Bus, nats_server: NatsServer,
                                                 tmp_path: Path) -> None:
    await ensure_streams(bus)  # the platform is up, but no agent runs
    done = await run_cli(cli_args(nats_server, tmp_path / "data", "--name", "alone", "--",
                                  "true"))
    assert done.returncode == 1
    assert "no local agent took the submission" in done.stderr
