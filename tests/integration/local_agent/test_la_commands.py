"""Commands about local workloads (profiler annotations, scheduler events) get results from
the local agent, as pods' get them from kube-bridge."""

from __future__ import annotations

import json
from pathlib import Path

from la_support import run_cli

from alnair.v1 import commands_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, TypedKV, subjects
from alnair_common.bus import decode
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for


async def result_of(bus: Bus, command_id: str) -> commands_pb2.CommandResult:
    async def probe():
        info = await bus.js.stream_info("COMMANDS")
        for seq in range(max(1, info.state.first_seq), info.state.last_seq + 1):
            msg = await bus.js.get_msg("COMMANDS", seq)
            if msg.subject == subjects.cmd_result():
                result = decode(msg.subject, msg.data, commands_pb2.CommandResult)
                if result.command_id == command_id:
                    return result
        return None

    return await wait_for(probe, timeout=20, what=f"result of {command_id}")


async def test_annotate_event_and_status_of_a_local_workload(
        bus: Bus, nats_server: NatsServer, agent, scheduler, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    done = await run_cli(["run", "--nats-url", nats_server.url, "--data-dir", str(data_dir),
                          "--name", "profiled", "--", "true"])
    assert done.returncode == 0, done.stderr
    [uid] = scheduler.bound
    ref = commands_pb2.ObjectRef(api_version="alnair.local/v1", kind="Workload",
                                 namespace="local", name="profiled", uid=uid)

    await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
        command_id="a1", object=ref, annotations={"ai.centaurus.io/job-type": "other"}))
    assert (await result_of(bus, "a1")).ok
    kv = await TypedKV.open(bus, "workload_states", wl.WorkloadEvent)
    record = (await kv.get(uid)).value
    assert record.workload.annotations["ai.centaurus.io/job-type"] == "other"
    assert record.workload.phase == wl.WORKLOAD_PHASE_SUCCEEDED

    await bus.publish(subjects.cmd_event(), commands_pb2.RecordEventCommand(
        command_id="e1", object=ref, type="Warning", reason="FailedScheduling",
        message="no card with 40 GiB free"))
    assert (await result_of(bus, "e1")).ok
    [line] = (data_dir / "workloads" / uid / "events.log").read_text().splitlines()
    assert json.loads(line)["message"] == "no card with 40 GiB free"

    await bus.publish(subjects.cmd_status(), commands_pb2.StatusUpdateCommand(
        command_id="s1", object=ref, status_json="{}"))
    status = await result_of(bus, "s1")
    assert not status.ok and status.permanent and "no status" in status.reason

    await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
        command_id="a-bad", object=ref, annotations={"example.com/x": "1"}))
    assert not (await result_of(bus, "a-bad")).ok

    ghost = commands_pb2.ObjectRef(api_version="alnair.local/v1", kind="Workload", uid="nope")
    await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
        command_id="a-ghost", object=ghost, annotations={"ai.centaurus.io/x": "1"}))
    missing = await result_of(bus, "a-ghost")
    assert not missing.ok and "NotFound" in missing.reason
