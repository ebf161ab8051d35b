"""Bad input and a MongoDB outage: clear logs, no crash, nothing lost."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path

import pytest
from prof_support import P, batch, event, events_settled, publish_batches, running, settings
from prometheus_client import generate_latest
from pymongo import MongoClient

from alnair.v1 import platform_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing._server_process import ServerProcess
from alnair_common.testing.mongo import MongoDatabase, start_mongo
from alnair_common.testing.testbin import Testbin

COLLECTION = "workload_profiles"


async def _true(value: object) -> bool:
    return bool(value)


async def test_bad_events_and_impossible_samples_are_rejected_and_the_rest_profiled(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path, promtool,  # type: ignore[no-untyped-def]
) -> None:
    errors: list[platform_pb2.ErrorEvent] = []

    async def on_error(_: str, m: platform_pb2.ErrorEvent) -> None:
        errors.append(m)

    await bus.subscribe(subjects.error("profiler"), platform_pb2.ErrorEvent, on_error)
    s = settings(nats_server.url, tmp_path, mongo_url=mongo.url, mongo_database=mongo.name,
                 unknown_sample_ttl_seconds=0.5)
    async with running(s) as service:
        no_uid = event("", "nameless", P.WORKLOAD_PHASE_RUNNING, 1)
        no_phase = event("uid-x", "phaseless", P.WORKLOAD_PHASE_UNSPECIFIED, 1)
        await bus.publish(subjects.workload_events(), no_uid)
        await bus.publish(subjects.workload_events(), no_phase)
        await bus.publish(subjects.workload_events(), event("uid-b", "ok", P.WORKLOAD_PHASE_RUNNING, 1))
        await events_settled(bus)
        good = [batch(i, {"uid-b": {"util": 0.5, "cpu": 2.0, "gpu_mem": 1e9}}) for i in range(4)]
        bad = [batch(10, {"uid-b": {"util": math.nan, "cpu": -3.0, "gpu_mem": 2e9}}),
               batch(11, {"uid-b": {"util": 7.0, "cpu": math.inf}}),
               batch(12, {"ghost": {"util": 1.0, "cpu": 99.0}})]
        await publish_batches(bus, good + bad)
        await wait_for(lambda: _true("ghost" in service.states), what="ghost samples held")
        await wait_for(lambda: _true("ghost" not in service.states), what="ghost samples dropped after the TTL")
        await bus.publish(subjects.workload_events(), event("uid-b", "ok", P.WORKLOAD_PHASE_SUCCEEDED, 2, end=12.0))
        # A terminal event for a workload never seen running still gets its record.
        await bus.publish(subjects.workload_events(), event("uid-late", "late", P.WORKLOAD_PHASE_FAILED, 7, end=3.0))
        record = await wait_for(lambda: _true(mongo.db[COLLECTION].find_one({"_id": "uid-b"})), what="record")
        late = await wait_for(lambda: _true(mongo.db[COLLECTION].find_one({"_id": "uid-late"})), what="late record")
        await wait_for(lambda: _true(len(errors) >= 2), what="two ErrorEvents")
        # A record is visible before its owners and checkpoint are done: wait for the writer.
        await wait_for(lambda: _true(not service.writer.pending), what="nothing waiting to be written")
        report = await service.health.report()

    record = mongo.db[COLLECTION].find_one({"_id": "uid-b"})
    late = mongo.db[COLLECTION].find_one({"_id": "uid-late"})
    assert report.ready, dict(report.checks)
    assert record["series"]["gpu_utilization_ratio"] == {"max": 0.5, "deciles": [0.5] * 10, "samples": 4}
    assert record["series"]["cpu_cores"]["max"] == pytest.approx(2.0)
    assert record["series"]["cpu_cores"]["samples"] == 4
    # The memory reading of the NaN batch was fine and is kept: one bad value costs one value.
    assert record["series"]["gpu_memory_bytes"]["max"] == pytest.approx(2e9)
    assert late["phase"] == "FAILED" and late["series"]["cpu_cores"]["samples"] == 0
    assert mongo.db[COLLECTION].find_one({"_id": "ghost"}) is None
    exposition = "\n".join(line for line in generate_latest().decode().splitlines()
                           if "alnair_profiler_" in line) + "\n"
    assert 'alnair_profiler_rejected_values_total{metric="cpu_cores",reason="negative"}' in exposition
    assert promtool(exposition) == []
    reasons = " | ".join(e.message for e in errors)
    assert "has no uid" in reasons and "has no phase" in reasons, reasons
    assert all(e.permanent and e.service == "profiler" for e in errors)


async def test_mongodb_outage_keeps_profiles_and_writes_them_when_it_returns(
    nats_server: NatsServer, bus: Bus, testplane_bin: Testbin, tmp_path: Path,
) -> None:
    server = start_mongo(testplane_bin, tmp_path / "ferretdb")
    restarted: ServerProcess | None = None
    try:
        s = settings(nats_server.url, tmp_path / "profiler", mongo_url=f"{server.url}outage",
                     mongo_database="outage", store_timeout_seconds=0.5)
        async with running(s) as service:
            await bus.publish(subjects.workload_events(), event("uid-o", "during-outage", P.WORKLOAD_PHASE_RUNNING, 1))
            await events_settled(bus)
            await publish_batches(bus, [batch(i, {"uid-o": {"util": 0.8, "cpu": 4.0}}) for i in range(5)])
            server.stop()
            await bus.publish(subjects.workload_events(),
                              event("uid-o", "during-outage", P.WORKLOAD_PHASE_SUCCEEDED, 2, end=5.0))
            await wait_for(lambda: _true(service.writer and service.writer.is_pending("uid-o")),
                           what="profile spooled while MongoDB is down", timeout=10)
            report = await service.health.report()
            assert not report.ready and "waiting for the store" in report.checks["store"]
        assert list((tmp_path / "profiler" / "profiler" / "spool").glob("*.json")), "spool file on disk"
        # A profiler restarted during the outage still holds the profile (from its spool)...
        async with running(s, consuming=False) as again:
            assert again.writer is not None and again.writer.is_pending("uid-o")
            restarted = ServerProcess("ferretdb", server.process.argv, tmp_path / "ferretdb-again.log")
            client: MongoClient = MongoClient(server.url, serverSelectionTimeoutMS=5000)
            try:
                # ...and writes it once MongoDB answers again.
                doc = await wait_for(lambda: _true(client["outage"][COLLECTION].find_one({"_id": "uid-o"})),
                                     what="profile written after the outage", timeout=20)
                await wait_for(lambda: _true(not again.writer.pending), what="spool drained")
                doc = client["outage"][COLLECTION].find_one({"_id": "uid-o"})
            finally:
                client.close()
        assert doc["series"]["gpu_utilization_ratio"]["max"] == pytest.approx(0.8)
        assert doc["series"]["cpu_cores"]["samples"] == 5
        assert not list((tmp_path / "profiler" / "profiler" / "spool").glob("*.json"))
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()



async def test_a_hanging_prometheus_does_not_delay_the_record(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts connections, never answers
    try:
        port = silent.getsockname()[1]
        s = settings(nats_server.url, tmp_path, mongo_url=mongo.url, mongo_database=mongo.name,
                     prometheus_url=f"http://127.0.0.1:{port}", prometheus_timeout_seconds=0.5)
        async with running(s):
            await bus.publish(subjects.workload_events(), event("uid-h", "hang", P.WORKLOAD_PHASE_RUNNING, 1))
            await events_settled(bus)
            await publish_batches(bus, [batch(i, {"uid-h": {"cpu": 3.0}}) for i in range(3)])
            ended = time.monotonic()
            await bus.publish(subjects.workload_events(),
                              event("uid-h", "hang", P.WORKLOAD_PHASE_SUCCEEDED, 2, end=3.0))
            await wait_for(lambda: _true(mongo.db[COLLECTION].find_one({"_id": "uid-h"})), what="record", timeout=5)
            latency = time.monotonic() - ended
    finally:
        silent.close()
    # Without one budget for all queries this takes 8 queries × 0.5 s = 4 s.
    assert latency < 1.5, f"record took {latency:.2f} s with Prometheus hanging"
    assert mongo.db[COLLECTION].find_one({"_id": "uid-h"})["series"]["cpu_cores"]["max"] == pytest.approx(3.0)


async def test_a_stale_checkpoint_never_overwrites_a_written_record(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path,
) -> None:
    s = settings(nats_server.url, tmp_path, mongo_url=mongo.url, mongo_database=mongo.name)
    async with running(s):
        await bus.publish(subjects.workload_events(), event("uid-s", "stale", P.WORKLOAD_PHASE_RUNNING, 1))
        await events_settled(bus)
        await publish_batches(bus, [batch(i, {"uid-s": {"cpu": 5.0}}) for i in range(4)])
        await wait_for(lambda: _true(mongo.db[f"{COLLECTION}_inflight"].find_one({"_id": "uid-s"})),
                       what="checkpoint")
        checkpoint = mongo.db[f"{COLLECTION}_inflight"].find_one({"_id": "uid-s"})
        await bus.publish(subjects.workload_events(), event("uid-s", "stale", P.WORKLOAD_PHASE_SUCCEEDED, 2, end=4.0))
        await wait_for(lambda: _true(mongo.db[COLLECTION].find_one({"_id": "uid-s"})), what="record")
    record = mongo.db[COLLECTION].find_one({"_id": "uid-s"})
    # As if the profiler had died between writing the record and deleting its checkpoint.
    checkpoint["series"]["cpu_cores"]["v"] = [0.1]
    mongo.db[f"{COLLECTION}_inflight"].insert_one(checkpoint)
    await bus.js.delete_consumer("WORKLOADS", "profiler-workloads")  # and the events replay
    async with running(s):
        await events_settled(bus)
        await wait_for(lambda: _true(mongo.db[f"{COLLECTION}_inflight"].find_one({"_id": "uid-s"}) is None),
                       what="stale checkpoint removed")
    assert mongo.db[COLLECTION].find_one({"_id": "uid-s"}) == record
