"""Utilisation-aware placement fed with REAL H200 NVML recordings (tests/data/gpu/h200).

Card 0 replays a training run (train_cnn_b512, SM utilisation near 100 %), card 1 an idle
notebook. Committed allocations alone would put the second workload on the empty card 0;
the measured peaks send both to card 1, whose measured load plus commitments stays lower.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from sched_harness import Adapter, Observer, stamp, start_scheduler, stop_scheduler

from alnair.v1 import metrics_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for

DATA = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200"


def recorded(name: str) -> list[dict]:
    with gzip.open(DATA / f"{name}.jsonl.gz", "rt") as f:
        return [s["gpus"][0] for s in map(json.loads, f) if s.get("kind") == "sample"]


async def test_measured_h200_load_steers_placement(nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    busy, idle = recorded("train_cnn_b512"), recorded("idle_notebook")
    assert max(g["utilization_gpu_pct"] for g in busy) >= 90
    assert max(g["utilization_gpu_pct"] for g in idle) <= 10
    total_gib = busy[0]["memory_total_bytes"] // 1024**3
    uuids = await adapter.inventory("h200", [(total_gib, 100), (total_gib, 100)])
    service, task = await start_scheduler(nats_server.url, scheduling_profile="utilisation-aware")
    try:
        for b, i in zip(busy, idle, strict=False):
            await bus.publish(subjects.gpu_metrics("h200"), metrics_pb2.NodeSampleBatch(
                node="h200", sampled_at=stamp(), gpus=[
                    metrics_pb2.GpuSample(gpu_uuid=uuids[k], gpu_index=k,
                                          utilization_ratio=g["utilization_gpu_pct"] / 100,
                                          memory_used_bytes=g["memory_used_bytes"],
                                          memory_total_bytes=g["memory_total_bytes"])
                    for k, g in enumerate((b, i))]))

        async def replayed() -> bool:
            load = service.engine.util.load(uuids[0])
            return load is not None and load.utilization_ratio >= 0.9

        await wait_for(replayed, what="recorded samples reached the scheduler")
        pods = [await adapter.pending(f"w{i}", 10, 30) for i in range(2)]
        decisions = await seen.bound(*pods)
        assert [d.assignment.gpu_uuid for d in decisions] == [uuids[1], uuids[1]]
    finally:
        await stop_scheduler(service, task)
