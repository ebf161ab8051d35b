"""CUDA-level usage of workloads, from the interceptor's regions in their workspaces.

Each workload's processes share one region file (``<workspaces>/<uid>/cuda.region``); a
:class:`RegionReading` (from :mod:`._region_scanner`) becomes one :class:`CudaUsage` per GPU
the workload used. Counters (launches, copy bytes, throttled time) include exited processes
so that a process ending never makes a counter go backwards; memory in use and the process
count cover live processes only. The kernel-name flags are any process's (names read, a PyTorch
kernel seen), over exited processes too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import metrics_pb2
from alnair_common.cuda_region import Region

from ._workloads import WorkloadInfo


@dataclass(frozen=True, slots=True)
class CudaUsage:
    """One workload on one GPU (CUDA ordinal ``device``) at one moment."""

    workload: WorkloadInfo
    device: int
    gpu_uuid: str
    kernel_launches_total: int
    tokens_available: int
    memory_used_bytes: int
    memory_limit_bytes: int | None  # None: no limit
    compute_limit_percent: int
    memcpy_htod_bytes_total: int
    memcpy_dtoh_bytes_total: int
    memcpy_dtod_bytes_total: int
    throttled_seconds_total: float
    launch_period_seconds: float
    launch_period_repeats: int
    processes: int
    sm_utilization_ratio: float | None = None  # the interceptor's last NVML measurement
    # what the kernels' names say (region layout 4; all zero/False from a layout-3 region)
    training_kernel_launches_total: int = 0
    kernel_names_read: bool = False
    torch_kernels_seen: bool = False

    def to_proto(self, node: str, sampled_at: float) -> metrics_pb2.CudaSample:
        ts = Timestamp()
        ts.FromNanoseconds(int(sampled_at * 1e9))
        return metrics_pb2.CudaSample(
            workload=self.workload.to_proto(), node=node, gpu_uuid=self.gpu_uuid, sampled_at=ts,
            kernel_launches_total=self.kernel_launches_total, tokens_available=self.tokens_available,
            memory_used_bytes=self.memory_used_bytes, memory_limit_bytes=self.memory_limit_bytes or 0,
            compute_limit_percent=self.compute_limit_percent,
            memcpy_htod_bytes_total=self.memcpy_htod_bytes_total,
            memcpy_dtoh_bytes_total=self.memcpy_dtoh_bytes_total,
            memcpy_dtod_bytes_total=self.memcpy_dtod_bytes_total,
            throttled_seconds_total=self.throttled_seconds_total,
            launch_period_seconds=self.launch_period_seconds, launch_period_repeats=self.launch_period_repeats,
            processes=self.processes, sm_utilization_ratio=self.sm_utilization_ratio,
            training_kernel_launches_total=self.training_kernel_launches_total,
            kernel_names_read=self.kernel_names_read, torch_kernels_seen=self.torch_kernels_seen,
        )


@dataclass(frozen=True, slots=True)
class RegionReading:
    """A decoded region and the workload it belongs to."""

    workload: WorkloadInfo
    region: Region
    path: Path

    def pids(self) -> set[int]:
        """Host PIDs of the live processes (the namespace PID where the host one is unknown)."""
        return {s.host_pid or s.pid for s in self.region.active()}

    def usage(self, gpu_uuid_of: Callable[[int], str]) -> list[CudaUsage]:
        """One CudaUsage per CUDA device any process of the workload touched."""
        slots, live = self.region.slots, self.region.active()
        devices = sorted({d for s in slots for d in s.active_devices()})
        header = self.region.header
        out = []
        for d in devices:
            recs = [s.devices[d] for s in slots]
            live_recs = [s.devices[d] for s in live]
            newest = max(live, key=lambda s: s.updated_unix_ns, default=None)
            period = max((s for s in live if s.iteration_period_ns), key=lambda s: s.iterations, default=None)
            out.append(CudaUsage(
                workload=self.workload, device=d, gpu_uuid=gpu_uuid_of(d),
                kernel_launches_total=sum(r.kernel_launches + r.graph_launches for r in recs),
                tokens_available=newest.devices[d].tokens_available if newest else 0,
                memory_used_bytes=sum(r.memory_used_bytes for r in live_recs),
                memory_limit_bytes=header.memory_limit_bytes,
                compute_limit_percent=header.compute_percent,
                memcpy_htod_bytes_total=sum(r.memcpy_htod_bytes for r in recs),
                memcpy_dtoh_bytes_total=sum(r.memcpy_dtoh_bytes for r in recs),
                memcpy_dtod_bytes_total=sum(r.memcpy_dtod_bytes for r in recs),
                throttled_seconds_total=sum(r.throttled_ns for r in recs) / 1e9,
                launch_period_seconds=period.iteration_period_ns / 1e9 if period else 0.0,
                launch_period_repeats=period.iterations if period else 0,
                processes=sum(1 for s in live if not s.devices[d].idle),
                sm_utilization_ratio=max(measured) / 100.0 if (measured := [
                    r.sm_util_percent for r in live_recs if r.sm_util_percent is not None]) else None,
                training_kernel_launches_total=sum(r.training_kernel_launches for r in recs),
                kernel_names_read=any(r.kernel_names_read for r in recs),
                torch_kernels_seen=any(r.torch_kernels_seen for r in recs),
            ))
        return out

