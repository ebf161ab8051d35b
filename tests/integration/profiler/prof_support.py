"""Builders and a runner shared by the profiler's integration tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import common_pb2, metrics_pb2, workload_pb2
from alnair_common import Bus, subjects
from alnair_common.testing import wait_for
from alnair_profiler import ProfilerService, ProfilerSettings

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
P = workload_pb2


def ts(when: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(when)
    return out


def event(uid: str, name: str, phase: int, sequence: int, *, owner: tuple[str, str, str] | None = None,
          namespace: str = "ml", kube: bool = True, start: float = 0.0, end: float | None = None) -> P.WorkloadEvent:
    w = P.Workload(
        ref=common_pb2.WorkloadRef(uid=uid, name=name, namespace=namespace,
                                   mode=common_pb2.MODE_KUBERNETES if kube else common_pb2.MODE_LOCAL),
        request=common_pb2.GpuRequest(memory_gib=8, compute_percent=30), phase=phase, node="node-1",
        assignment=common_pb2.GpuAssignment(node="node-1", gpu_uuid="GPU-1", gpu_index=0, memory_gib=8,
                                            compute_percent=30),
        started_at=ts(T0 + timedelta(seconds=start)))
    if owner is not None:
        kind, oname, ouid = owner
        w.owners.append(common_pb2.OwnerRef(api_version="batch/v1", kind=kind, name=oname, uid=ouid))
    if end is not None:
        w.finished_at.CopyFrom(ts(T0 + timedelta(seconds=end)))
    return P.WorkloadEvent(workload=w, sequence=sequence, source="test", observed_at=ts(T0))


def batch(t: float, readings: dict[str, dict[str, float]], *, node: str = "node-1") -> metrics_pb2.NodeSampleBatch:
    """``readings``: uid → {util, gpu_mem, cpu, mem, disk, net}."""
    b = metrics_pb2.NodeSampleBatch(node=node, sampled_at=ts(T0 + timedelta(seconds=t)))
    for uid, r in readings.items():
        ref = common_pb2.WorkloadRef(uid=uid)
        if "util" in r or "gpu_mem" in r:
            b.processes.append(metrics_pb2.ProcessSample(
                pid=100, gpu_uuid="GPU-1", sm_utilization_ratio=r.get("util", 0.0),
                memory_used_bytes=int(r.get("gpu_mem", 0)), workload=ref))
        if "cpu" in r:
            b.hosts.append(metrics_pb2.HostSample(
                workload=ref, cpu_cores=r["cpu"], memory_bytes=int(r.get("mem", 0)),
                disk_read_bytes_per_second=r.get("disk", 0.0), network_receive_bytes_per_second=r.get("net", 0.0)))
    return b


async def publish_batches(bus: Bus, batches: list[metrics_pb2.NodeSampleBatch]) -> None:
    for b in batches:
        await bus.publish(subjects.gpu_metrics(b.node), b)
    await bus.nc.flush()


def settings(nats_url: str, data_dir: Path, **extra: Any) -> ProfilerSettings:
    return ProfilerSettings(nats_url=nats_url, node_name="node-1", data_dir=data_dir,
                            checkpoint_interval_seconds=0.2, retry_interval_seconds=0.2, **extra)


@contextlib.asynccontextmanager
async def running(s: ProfilerSettings, *, consuming: bool = True) -> AsyncIterator[ProfilerService]:
    service = ProfilerService(s)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.ready.wait(), 20)
        if consuming:
            # The event consumer starts once the store answered; wait for it.
            await wait_for(lambda: _consuming(service), what="profiler consuming events", timeout=20)
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 30)


async def _consuming(service: ProfilerService) -> bool:
    return bool(service._consumers)


async def events_settled(bus: Bus, durable: str = "profiler-workloads") -> None:
    """Wait until the profiler's durable consumer has acknowledged every workload event."""
    async def done() -> bool:
        info = await bus.js.consumer_info("WORKLOADS", durable)
        stream = await bus.js.stream_info("WORKLOADS")
        return info.num_ack_pending == 0 and info.num_pending == 0 and \
            info.delivered.stream_seq >= stream.state.last_seq
    await wait_for(done, what="profiler handled every workload event", timeout=15)
