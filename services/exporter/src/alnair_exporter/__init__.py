"""Alnair exporter: GPU, per-process, CUDA-level and host metrics per workload.

Prometheus exposition on the service's ``/metrics`` (custom collectors over the latest
sample, see :mod:`.collectors`) and the same samples on ``alnair.metrics.gpu.<node>`` and
``alnair.metrics.cuda.<node>.<workload>``.
"""

from ._cuda import CudaUsage, RegionReading
from ._host import HostCounters, HostReader, HostUsage
from ._identity import CgroupPodResolver, ChainResolver, PidResolver, StaticResolver, WorkspacePidResolver
from ._region_scanner import RegionScanner
from ._sampler import NodeSampler
from ._service import ExporterService
from ._settings import ExporterSettings
from ._stats import ExporterStats
from ._view import AttributedProcess, NodeView, PodGpuUsage, WorkloadSeries
from ._workloads import InvalidWorkloadEvent, WorkloadDirectory, WorkloadInfo, WorkloadUpdate

__all__ = [
    "AttributedProcess",
    "CgroupPodResolver",
    "ChainResolver",
    "CudaUsage",
    "ExporterService",
    "ExporterSettings",
    "ExporterStats",
    "HostCounters",
    "HostReader",
    "HostUsage",
    "InvalidWorkloadEvent",
    "NodeSampler",
    "NodeView",
    "PidResolver",
    "PodGpuUsage",
    "RegionReading",
    "RegionScanner",
    "StaticResolver",
    "WorkloadDirectory",
    "WorkloadInfo",
    "WorkloadSeries",
    "WorkloadUpdate",
    "WorkspacePidResolver",
]
