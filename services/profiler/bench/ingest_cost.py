"""CPU cost of the profiler's hot paths, without servers (for docs/benchmarks.md).

    python services/profiler/bench/ingest_cost.py

* ingest: NodeSampleBatch messages (50 workloads, one process + one host sample each)
  decoded, validated and added to the running series, per second;
* finish: computing one profile (summaries, detection, prediction) from a workload with
  20,000 points per series (the thinning bound: ~5.5 h at 1 Hz).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import common_pb2, metrics_pb2
from alnair_profiler._accumulator import WorkloadState
from alnair_profiler._domain import Point, WorkloadInfo, points_from_batch


def batch(t: float, workloads: int) -> bytes:
    ts = Timestamp()
    ts.FromDatetime(datetime.fromtimestamp(t, UTC))
    b = metrics_pb2.NodeSampleBatch(node="n", sampled_at=ts)
    for w in range(workloads):
        ref = common_pb2.WorkloadRef(uid=f"w{w}")
        b.processes.append(metrics_pb2.ProcessSample(pid=w, sm_utilization_ratio=0.5, memory_used_bytes=1 << 30,
                                                     workload=ref))
        b.hosts.append(metrics_pb2.HostSample(workload=ref, cpu_cores=1.0, memory_bytes=1 << 30))
    return b.SerializeToString()


def main() -> None:
    payloads = [batch(1e9 + i, 50) for i in range(400)]
    states: dict[str, WorkloadState] = {}
    start = time.perf_counter()
    for data in payloads:
        msg = metrics_pb2.NodeSampleBatch.FromString(data)
        for item in points_from_batch(msg):
            if isinstance(item, Point):
                states.setdefault(item.uid, WorkloadState(item.uid)).add(item)
    took = time.perf_counter() - start
    print(f"ingest: {len(payloads) / took:,.0f} batches/s of 50 workloads "
          f"({len(payloads) * 50 / took:,.0f} workload-samples/s)")
    state = WorkloadState("big")
    for i in range(20_000):
        for metric in ("gpu_utilization_ratio", "gpu_memory_bytes", "cpu_cores", "memory_bytes"):
            state.add(Point("big", metric, i * 1.0, 0.5 + (i % 7) / 20))
    info = WorkloadInfo("big", "big", "ns", "LOCAL", (), "n", "SUCCEEDED", 2)
    start = time.perf_counter()
    profile = state.profile(info)
    took = time.perf_counter() - start
    print(f"finish: one profile from 4 series x 20,000 points in {took * 1e3:.0f} ms "
          f"(training={profile.training.is_training})")


if __name__ == "__main__":
    main()
