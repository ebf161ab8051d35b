"""What one sampling period measured on this node, attributed to workloads.

A :class:`NodeView` is immutable and replaced whole each period, so the Prometheus
collectors (scrape handler) and the bus publisher read a consistent picture without locks.
:meth:`NodeView.batch` is the period's bus shape; each part converts itself (``to_proto``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import metrics_pb2
from alnair_gpu import DeviceSample, ProcessSample

from ._allocations import PodAllocations
from ._cuda import CudaUsage
from ._host import HostUsage
from ._workloads import WorkloadInfo


@dataclass(frozen=True, slots=True)
class AttributedProcess:
    sample: ProcessSample
    workload: WorkloadInfo | None  # None: the process belongs to no known workload


@dataclass(frozen=True, slots=True)
class PodGpuUsage:
    """All processes of one workload on one GPU, summed (several pods may share the GPU)."""

    workload: WorkloadInfo
    gpu_uuid: str
    gpu_index: int
    sm_utilization_ratio: float | None  # None until NVML sampled any of its processes
    memory_bandwidth_ratio: float | None
    memory_used_bytes: int
    processes: int


@dataclass(frozen=True, slots=True)
class WorkloadSeries:
    """Everything shown for one workload; kept as last seen during the grace period."""

    workload: WorkloadInfo
    gpus: tuple[PodGpuUsage, ...] = ()
    cuda: tuple[CudaUsage, ...] = ()
    host: HostUsage | None = None
    live: bool = True


@dataclass(frozen=True)
class NodeView:
    node: str
    sampled_at: float
    simulated: bool = False
    devices: tuple[DeviceSample, ...] = ()
    processes: tuple[AttributedProcess, ...] = ()
    series: tuple[WorkloadSeries, ...] = ()
    fresh_cuda: tuple[CudaUsage, ...] = field(default=(), repr=False)
    allocations: PodAllocations = field(default_factory=PodAllocations)

    def batch(self) -> metrics_pb2.NodeSampleBatch:
        """The period as published on ``alnair.metrics.gpu.<node>`` (live workloads only)."""
        ts = Timestamp()
        ts.FromNanoseconds(int(self.sampled_at * 1e9))
        batch = metrics_pb2.NodeSampleBatch(node=self.node, sampled_at=ts, simulated=self.simulated)
        for d in self.devices:
            batch.gpus.add(
                gpu_uuid=d.uuid, gpu_index=d.index,
                utilization_ratio=d.utilization_ratio or 0.0,
                memory_bandwidth_ratio=d.memory_bandwidth_ratio or 0.0,
                memory_used_bytes=d.memory_used_bytes, memory_total_bytes=d.memory_total_bytes,
                power_watts=d.power_watts or 0.0, temperature_celsius=d.temperature_celsius or 0.0,
                sm_clock_hertz=d.sm_clock_hertz or 0.0, ecc_errors_total=d.ecc_errors_total or 0,
                last_xid=d.last_xid or 0,
            )
        for p in self.processes:
            s = p.sample
            msg = batch.processes.add(
                pid=s.pid, gpu_uuid=s.gpu_uuid,
                sm_utilization_ratio=s.sm_utilization_ratio or 0.0,
                memory_bandwidth_ratio=s.memory_bandwidth_ratio or 0.0,
                memory_used_bytes=s.memory_used_bytes or 0,
            )
            if p.workload is not None:
                msg.workload.CopyFrom(p.workload.to_proto())
        for series in self.series:
            if series.live and series.host is not None:
                batch.hosts.append(series.host.to_proto())
        return batch
