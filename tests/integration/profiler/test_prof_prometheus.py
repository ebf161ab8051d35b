"""PromQL maxima (cAdvisor metrics) merged into the record, against a real Prometheus."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prof_support import T0, P, batch, event, events_settled, publish_batches, running, settings
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer, free_port
from alnair_common.testing import wait_for
from alnair_common.testing.mongo import MongoDatabase

COLLECTION = "workload_profiles"
GIB = 2**30


async def _true(value: object) -> bool:
    return bool(value)


class _SteadyCounters(Collector):
    """cAdvisor-like counters that grow at exact rates with wall time: 2 cores, 10 kB/s of
    reads, 1 kB/s received (exact whatever the test machine's load)."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.t0 = time.time()

    def collect(self):  # type: ignore[no-untyped-def]
        elapsed = time.time() - self.t0
        for name, rate, labels in (("container_cpu_usage_seconds", 2.0, self.labels),
                                   ("container_fs_reads_bytes", 10_000.0, self.labels),
                                   ("container_network_receive_bytes", 1_000.0,
                                    {"namespace": "ml", "pod": "cadvisor-pod"})):
            family = CounterMetricFamily(name, name, labels=list(labels))
            family.add_metric(list(labels.values()), rate * elapsed)
            yield family


async def test_promql_maxima_are_merged_into_the_record(
    nats_server: NatsServer, bus: Bus, mongo: MongoDatabase, tmp_path: Path, prometheus,  # type: ignore[no-untyped-def]
) -> None:
    # A test exporter standing in for cAdvisor: the same metric names and labels.
    registry = CollectorRegistry()
    labels = {"namespace": "ml", "pod": "cadvisor-pod", "container": "main"}
    memory = Gauge("container_memory_working_set_bytes", "ws", list(labels), registry=registry)
    registry.register(_SteadyCounters(labels))
    other = Gauge("container_memory_working_set_bytes_other", "another pod", [], registry=registry)
    memory.labels(**labels).set(3 * GIB)
    memory.labels(namespace="ml", pod="someone-else", container="main").set(50 * GIB)
    other.set(1)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)

    prom = prometheus([f"127.0.0.1:{port}"])
    try:
        prom.wait_for_targets_up()
        start = (datetime.now(UTC) - T0).total_seconds()
        s = settings(nats_server.url, tmp_path, mongo_url=mongo.url, mongo_database=mongo.name,
                     prometheus_url=prom.url, prometheus_rate_window_seconds=5,
                     prometheus_resolution_seconds=1)
        async with running(s):
            await bus.publish(subjects.workload_events(),
                              event("uid-p", "cadvisor-pod", P.WORKLOAD_PHASE_RUNNING, 1, start=start))
            await events_settled(bus)
            await publish_batches(bus, [batch(start + i, {"uid-p": {"cpu": 0.5, "mem": 2**20, "util": 0.3}})
                                        for i in range(2)])
            # Let Prometheus see the peak, then the memory fall back before the pod ends.
            await asyncio.to_thread(prom.wait_for_value,
                                    'rate(container_cpu_usage_seconds_total{pod="cadvisor-pod"}[5s]) > 1.6')
            memory.labels(**labels).set(1 * GIB)
            await asyncio.to_thread(prom.wait_for_value,
                                    'container_memory_working_set_bytes{pod="cadvisor-pod"} < 2e9')
            end = (datetime.now(UTC) - T0).total_seconds()
            await bus.publish(subjects.workload_events(),
                              event("uid-p", "cadvisor-pod", P.WORKLOAD_PHASE_SUCCEEDED, 2, start=start, end=end))
            await wait_for(lambda: _true(mongo.db[COLLECTION].find_one({"_id": "uid-p"})), what="record")
        record = mongo.db[COLLECTION].find_one({"_id": "uid-p"})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

    series = record["series"]
    assert series["memory_bytes"]["max"] == 3 * GIB  # cAdvisor's peak, not the bus's 1 MiB, not the other pod
    assert series["memory_bytes"]["samples"] > 2  # backfilled from the range query
    assert min(series["memory_bytes"]["deciles"]) == 1 * GIB
    assert series["cpu_cores"]["max"] == pytest.approx(2.0, rel=0.3)
    assert series["disk_io_bytes_per_second"]["max"] == pytest.approx(10_000, rel=0.3)
    assert series["network_bytes_per_second"]["max"] == pytest.approx(1_000, rel=0.3)
    assert series["gpu_utilization_ratio"]["max"] == pytest.approx(0.3)  # bus-only series untouched
