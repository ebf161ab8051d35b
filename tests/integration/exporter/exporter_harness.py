"""Runs a real ExporterService in the test's event loop against the test's nats-server.

The GPU is the only fake: a ReplaySampler over a real H200 recording. Everything else is
real: the bus, the service runtime, the HTTP /metrics endpoint, region files, /proc and
cgroup files of real processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from alnair.v1 import workload_pb2
from alnair_common import Bus, ensure_streams, subjects
from alnair_exporter import ExporterService, ExporterSettings

H200 = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200"
SHARE = H200 / "share_cnn_transformer.jsonl.gz"
H200_UUID = "GPU-f2b4712f-9931-af4b-7a24-58183960c4b7"


def settings(nats_url: str, tmp: Path, **overrides: Any) -> ExporterSettings:
    values: dict[str, Any] = {
        "nats_url": nats_url, "node_name": "gpu-node-1", "health_port": 0, "metrics_port": 0, "gpu_source": "none",
        "workspaces_dir": tmp / "workspaces", "data_dir": tmp / "data", "sample_period_seconds": 0.2,
        "grace_seconds": 2.0, "host_period_seconds": 0.2, "log_format": "console",
    }
    values.update(overrides)
    (tmp / "workspaces").mkdir(parents=True, exist_ok=True)
    return ExporterSettings(**values)


@asynccontextmanager
async def running_exporter(config: ExporterSettings, **seams: Any) -> AsyncIterator[ExporterService]:
    service = ExporterService(config, **seams)
    task = asyncio.create_task(service.run())
    try:
        ready = asyncio.create_task(service.ready.wait())
        done, _ = await asyncio.wait({ready, task}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # raises the start-up error
        if ready not in done:
            raise TimeoutError("exporter not ready within 20 s")
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 20)


async def publish_workload(bus: Bus, uid: str, name: str, namespace: str = "ml", *,
                           phase: int = workload_pb2.WORKLOAD_PHASE_RUNNING, sequence: int = 1,
                           gpu_uuid: str = "", node: str = "gpu-node-1") -> None:
    await ensure_streams(bus)  # idempotent; the adapters' streams may not exist yet
    event = workload_pb2.WorkloadEvent(sequence=sequence, source="test")
    w = event.workload
    w.ref.uid, w.ref.name, w.ref.namespace = uid, name, namespace
    w.phase = phase
    w.node = node
    if gpu_uuid:
        w.assignment.gpu_uuid = gpu_uuid
    await bus.publish(subjects.workload_events(), event)


async def scrape(service: ExporterService) -> str:
    assert service.metrics is not None
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{service.metrics.port}/metrics", timeout=10)
    response.raise_for_status()
    return response.text


def series(exposition: str, name: str) -> dict[str, float]:
    """``{label-block: value}`` of one metric name in a text exposition."""
    out = {}
    for line in exposition.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name):]] = float(value)
    return out
