"""The profiler against real servers: NATS with JetStream and a MongoDB-wire server (FerretDB)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from prof_support import T0, P, batch, event, events_settled, publish_batches, running, settings, ts

from alnair.v1 import commands_pb2, common_pb2, metrics_pb2, profile_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.mongo import MongoDatabase
from alnair_profiler.evaluation import load_recording

COLLECTION = "workload_profiles"
RECORDINGS = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200"


def _profile_settings(nats_server: NatsServer, mongo: MongoDatabase, tmp_path: Path, **extra):  # type: ignore[no-untyped-def]
    return settings(nats_server.url, tmp_path, mongo_url=mongo.url, mongo_database=mongo.name, **extra)


async def _record(mongo: MongoDatabase, uid: str) -> dict | None:
    return mongo.db[COLLECTION].find_one({"_id": uid})


async def test_lifecycle_and_samples_give_one_record_with_maxima_and_deciles(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    completed: list[profile_pb2.WorkloadProfile] = []
    commands: list[commands_pb2.AnnotateCommand] = []

    async def on_completed(_: str, m: profile_pb2.WorkloadProfile) -> None:
        completed.append(m)

    async def on_annotate(_: str, m: commands_pb2.AnnotateCommand) -> None:
        commands.append(m)

    await bus.subscribe(subjects.profile_completed(), profile_pb2.WorkloadProfile, on_completed)
    await bus.subscribe(subjects.cmd_annotate(), commands_pb2.AnnotateCommand, on_annotate)
    async with running(_profile_settings(nats_server, mongo, tmp_path)):
        await bus.publish(subjects.workload_events(), event("uid-a", "train-a", P.WORKLOAD_PHASE_RUNNING, 1))
        await events_settled(bus)
        await publish_batches(bus, [
            batch(i * 0.5, {"uid-a": {"util": (i + 1) / 20, "gpu_mem": (i + 1) * 2**28, "cpu": (i + 1) * 0.5,
                                      "mem": (i + 1) * 2**20, "disk": 1000.0 * (i + 1), "net": 10.0 * (i + 1)}})
            for i in range(20)])
        ended = time.monotonic()
        await bus.publish(subjects.workload_events(),
                          event("uid-a", "train-a", P.WORKLOAD_PHASE_SUCCEEDED, 2, end=10.0))
        record = await wait_for(lambda: _record(mongo, "uid-a"), what="profile record", timeout=5)
        latency = time.monotonic() - ended
        await wait_for(lambda: _true(completed and commands), what="completed + annotate on the bus")

    print(f"profile record latency {latency * 1e3:.0f} ms")
    assert latency < 1.0, f"record written {latency:.2f} s after the end event; the issue asks < 1 s"
    util = record["series"]["gpu_utilization_ratio"]
    assert util["max"] == pytest.approx(1.0)
    assert util["deciles"] == pytest.approx([0.1 * k for k in range(1, 11)])
    assert util["samples"] == 20
    assert record["series"]["gpu_memory_bytes"]["max"] == 20 * 2**28
    assert record["series"]["cpu_cores"]["max"] == pytest.approx(10.0)
    assert record["series"]["cpu_cores"]["deciles"][0] == pytest.approx(1.0)
    assert record["series"]["memory_bytes"]["max"] == 20 * 2**20
    assert record["series"]["disk_io_bytes_per_second"]["max"] == pytest.approx(20_000.0)
    assert record["series"]["network_bytes_per_second"]["max"] == pytest.approx(200.0)
    assert record["phase"] == "SUCCEEDED" and record["name"] == "train-a" and record["namespace"] == "ml"
    assert record["gpu"]["uuid"] == "GPU-1" and record["request"] == {"memory_gib": 8, "compute_percent": 30}
    assert record["predicted_peak_gpu_memory_bytes"] > 0
    assert mongo.db[COLLECTION].count_documents({}) == 1
    assert {i["name"] for i in mongo.db[COLLECTION].list_indexes()} >= {"uid_1", "owners.uid_1", "finished_at_-1"}

    assert [m.workload.uid for m in completed] == ["uid-a"]
    assert completed[0].gpu_utilization_ratio.max == pytest.approx(1.0)
    assert len(completed[0].gpu_utilization_ratio.deciles) == 10
    assert commands[0].object.kind == "Pod" and commands[0].object.name == "train-a"
    assert commands[0].annotations["ai.centaurus.io/max-gpu-utilization-ratio"] == "1"
    assert commands[0].command_id == "profile-uid-a"


async def _true(value: object) -> bool:
    return bool(value)


async def test_replayed_events_leave_one_identical_record(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    lifecycle = [event("uid-r", "job-r", P.WORKLOAD_PHASE_PENDING, 1),
                 event("uid-r", "job-r", P.WORKLOAD_PHASE_RUNNING, 2),
                 event("uid-r", "job-r", P.WORKLOAD_PHASE_SUCCEEDED, 3, end=5.0),
                 event("uid-r", "job-r", P.WORKLOAD_PHASE_DELETED, 4, end=5.0)]
    async with running(_profile_settings(nats_server, mongo, tmp_path)):
        for e in lifecycle[:2]:
            await bus.publish(subjects.workload_events(), e)
        await events_settled(bus)
        await publish_batches(bus, [batch(i, {"uid-r": {"util": 0.5 + i / 100, "cpu": 2.0}}) for i in range(10)])
        for e in lifecycle[2:]:
            await bus.publish(subjects.workload_events(), e)
        first = await wait_for(lambda: _record(mongo, "uid-r"), what="profile record")
        await events_settled(bus)
        # Replay everything: the adapter re-lists after a restart and publishes again.
        for e in lifecycle:
            await bus.publish(subjects.workload_events(), e)
        await publish_batches(bus, [batch(20 + i, {"uid-r": {"util": 1.0, "cpu": 64.0}}) for i in range(3)])
        await events_settled(bus)
    # A new profiler whose durable consumer is gone replays the whole stream from the start
    # (and knows nothing in memory: the store alone must make the replay harmless).
    await bus.js.delete_consumer("WORKLOADS", "profiler-workloads")
    async with running(_profile_settings(nats_server, mongo, tmp_path)) as second:
        await events_settled(bus)
        assert (await bus.js.consumer_info("WORKLOADS", "profiler-workloads")).delivered.stream_seq >= 8
        assert "uid-r" in second.final
    assert mongo.db[COLLECTION].count_documents({}) == 1
    assert await _record(mongo, "uid-r") == first
    assert first["phase"] == "SUCCEEDED"
    assert first["series"]["cpu_cores"]["max"] == pytest.approx(2.0)


async def test_owner_record_holds_the_maxima_over_three_pods(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    owner = ("Job", "sweep", "owner-1")
    pods = {"p1": {"util": 0.9, "gpu_mem": 1e9, "cpu": 1.0},
            "p2": {"util": 0.2, "gpu_mem": 5e9, "cpu": 3.0},
            "p3": {"util": 0.4, "gpu_mem": 2e9, "cpu": 7.5, "net": 99.0}}
    annotations: list[commands_pb2.AnnotateCommand] = []

    async def on_annotate(_: str, m: commands_pb2.AnnotateCommand) -> None:
        annotations.append(m)

    await bus.subscribe(subjects.cmd_annotate(), commands_pb2.AnnotateCommand, on_annotate)
    async with running(_profile_settings(nats_server, mongo, tmp_path)):
        for uid in pods:
            await bus.publish(subjects.workload_events(), event(uid, f"sweep-{uid}", P.WORKLOAD_PHASE_RUNNING, 1,
                                                                owner=owner))
        await events_settled(bus)
        await publish_batches(bus, [batch(i, {uid: r for uid, r in pods.items()}) for i in range(5)])
        for uid in pods:
            await bus.publish(subjects.workload_events(), event(uid, f"sweep-{uid}", P.WORKLOAD_PHASE_SUCCEEDED, 2,
                                                                owner=owner, end=5.0))

        async def owner_doc() -> dict | None:
            doc = mongo.db[f"{COLLECTION}_owners"].find_one({"_id": "owner-1"})
            return doc if doc and doc["workload_count"] == 3 else None

        doc = await wait_for(owner_doc, what="owner record over 3 pods")
        await wait_for(lambda: _true([a for a in annotations if a.object.kind == "Job"
                                      and a.annotations["ai.centaurus.io/profiled-workloads"] == "3"]),
                       what="owner annotation over 3 pods")
    assert doc["name"] == "sweep" and doc["kind"] == "Job" and sorted(doc["workloads"]) == ["p1", "p2", "p3"]
    assert doc["maxima"]["gpu_utilization_ratio"] == pytest.approx(0.9)
    assert doc["maxima"]["gpu_memory_bytes"] == pytest.approx(5e9)
    assert doc["maxima"]["cpu_cores"] == pytest.approx(7.5)
    assert doc["maxima"]["network_bytes_per_second"] == pytest.approx(99.0)
    job = [a for a in annotations if a.object.kind == "Job" and a.command_id.endswith("-3")][0]
    assert job.object.name == "sweep" and job.object.namespace == "ml" and job.object.api_version == "batch/v1"
    assert job.annotations["ai.centaurus.io/max-cpu-cores"] == "7.5"
    assert mongo.db[COLLECTION].count_documents({"owners.uid": "owner-1"}) == 3


async def test_an_owner_kube_bridge_does_not_annotate_keeps_its_record_but_gets_no_command(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    annotations: list[commands_pb2.AnnotateCommand] = []

    async def on_annotate(_: str, m: commands_pb2.AnnotateCommand) -> None:
        annotations.append(m)

    await bus.subscribe(subjects.cmd_annotate(), commands_pb2.AnnotateCommand, on_annotate)
    owner = ("DaemonSet", "agent", "owner-ds")  # not an owner kind kube-bridge patches
    async with running(_profile_settings(nats_server, mongo, tmp_path)):
        await bus.publish(subjects.workload_events(), event("d1", "agent-x", P.WORKLOAD_PHASE_RUNNING, 1, owner=owner))
        await events_settled(bus)
        await bus.publish(subjects.workload_events(),
                          event("d1", "agent-x", P.WORKLOAD_PHASE_SUCCEEDED, 2, owner=owner, end=1.0))
        await wait_for(lambda: _true(mongo.db[f"{COLLECTION}_owners"].find_one({"_id": "owner-ds"})),
                       what="owner record")
        await wait_for(lambda: _true([a for a in annotations if a.object.kind == "Pod"]), what="pod annotation")
        await bus.nc.flush()
    assert [a.object.kind for a in annotations] == ["Pod"]


async def test_restart_in_the_middle_of_a_workload_keeps_both_halves(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    s = _profile_settings(nats_server, mongo, tmp_path)
    async with running(s):
        await bus.publish(subjects.workload_events(), event("uid-m", "long", P.WORKLOAD_PHASE_RUNNING, 1))
        await events_settled(bus)
        await publish_batches(bus, [batch(i, {"uid-m": {"util": 0.95, "gpu_mem": 7e9, "cpu": 6.0}})
                                    for i in range(6)])
        await wait_for(lambda: _true(mongo.db[f"{COLLECTION}_inflight"].find_one({"_id": "uid-m"})),
                       what="checkpoint of the running workload")
    async with running(s):
        await publish_batches(bus, [batch(10 + i, {"uid-m": {"util": 0.1, "gpu_mem": 1e9, "cpu": 1.0}})
                                    for i in range(4)])
        await bus.publish(subjects.workload_events(), event("uid-m", "long", P.WORKLOAD_PHASE_FAILED, 2, end=14.0))
        record = await wait_for(lambda: _record(mongo, "uid-m"), what="profile record after restart")
        await wait_for(lambda: _true(mongo.db[f"{COLLECTION}_inflight"].find_one({"_id": "uid-m"}) is None),
                       what="checkpoint removed")
    util = record["series"]["gpu_utilization_ratio"]
    assert util["samples"] == 10
    assert util["max"] == pytest.approx(0.95) and util["deciles"][0] == pytest.approx(0.1)
    assert record["series"]["gpu_memory_bytes"]["max"] == pytest.approx(7e9)
    assert record["series"]["cpu_cores"]["samples"] == 10
    assert record["phase"] == "FAILED"


async def test_interceptor_samples_give_memcpy_bandwidth_and_the_launch_period(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    async with running(_profile_settings(nats_server, mongo, tmp_path)):
        await bus.publish(subjects.workload_events(), event("uid-c", "under-interceptor", P.WORKLOAD_PHASE_RUNNING, 1))
        await events_settled(bus)
        copied = 0
        for k in range(12):
            copied += (4 if k == 6 else 1) * 10**9  # 1 GB/s, one second at 4 GB/s
            sample = metrics_pb2.CudaSample(
                workload=common_pb2.WorkloadRef(uid="uid-c"), node="node-1", gpu_uuid="GPU-1",
                sampled_at=ts(T0 + timedelta(seconds=k)), kernel_launches_total=1000 * k,
                memory_used_bytes=(2 + min(k, 3)) * 2**30, memcpy_htod_bytes_total=copied // 2,
                memcpy_dtoh_bytes_total=copied - copied // 2, launch_period_seconds=0.0123 if k > 1 else 0.0,
                launch_period_repeats=80 * k)
            await bus.publish(subjects.cuda_metrics("node-1", "uid-c"), sample)
        await bus.nc.flush()
        await bus.publish(subjects.workload_events(),
                          event("uid-c", "under-interceptor", P.WORKLOAD_PHASE_SUCCEEDED, 2, end=12.0))
        record = await wait_for(lambda: _record(mongo, "uid-c"), what="profile record")
    memcpy = record["series"]["memcpy_bytes_per_second"]
    assert memcpy["max"] == pytest.approx(4e9) and memcpy["samples"] == 11
    assert memcpy["deciles"][4] == pytest.approx(1e9)
    # By direction: half host→device, half device→host, nothing on the card.
    htod, dtoh = (record["series"][f"memcpy_{d}_bytes_per_second"] for d in ("htod", "dtoh"))
    assert htod["max"] == pytest.approx(2e9, rel=1e-6) and dtoh["max"] == pytest.approx(2e9, rel=1e-6)
    assert htod["samples"] == 11 and htod["deciles"][4] == pytest.approx(5e8, rel=1e-6)
    assert record["series"]["memcpy_dtod_bytes_per_second"]["max"] == 0.0
    assert record["series"]["gpu_memory_bytes"]["max"] == 5 * 2**30  # from the region: no NVML samples
    assert record["training"]["is_training"] and record["training"]["evidence"] == "launch-signature"
    assert record["training"]["period_seconds"] == pytest.approx(0.0123)


@pytest.mark.parametrize("recording", ["heldout_transformer_big", "heldout_irregular_s9", "heldout_idle"])
async def test_real_h200_recording_through_the_bus_is_classified_as_labelled(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path, recording: str,
) -> None:
    """The recorded NVML series, relayed as the exporter does (last value held, every 1 s)."""
    data = RECORDINGS / f"{recording}.jsonl.gz"
    [rec] = load_recording(data)
    times, util = rec.published(1.0)
    memory = dict(zip(rec.mem_times, rec.mem_values, strict=True))
    async with running(_profile_settings(nats_server, mongo, tmp_path)):
        await bus.publish(subjects.workload_events(), event("uid-rec", recording, P.WORKLOAD_PHASE_RUNNING, 1))
        await events_settled(bus)
        await publish_batches(bus, [batch(t, {"uid-rec": {"util": u, "gpu_mem": memory.get(t, 0.0)}})
                                    for t, u in zip(times, util, strict=True)])
        await bus.publish(subjects.workload_events(),
                          event("uid-rec", recording, P.WORKLOAD_PHASE_SUCCEEDED, 2, end=times[-1]))
        record = await wait_for(lambda: _record(mongo, "uid-rec"), what="profile record")
    assert record["training"]["is_training"] is rec.is_training, record["training"]
    assert record["training"]["evidence"] == "nvml-autocorrelation"
    assert record["training"]["period_seconds"] == 0.0  # below NVML's resolution: not invented
    assert record["series"]["gpu_utilization_ratio"]["max"] == pytest.approx(max(util))
    assert record["series"]["gpu_memory_bytes"]["max"] == max(memory.get(t, 0.0) for t in times)
