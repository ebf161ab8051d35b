"""Per-pod GPU usage from NVML per-process samples: the case dcgm-exporter users miss.

Several pods sharing one GPU each get their own series. The seed names of the original
Alnair exporter are kept with its meaning, percent 0..100 (dashboards and the profiler
compare them with percentages): ``alnair_gpu_util`` is the pod's SM utilisation (NVML per
process, summed over its processes on that GPU) and ``alnair_gpu_mem_util`` its
memory-bandwidth utilisation. A pod whose processes NVML has not sampled yet has no
utilisation series (rather than a false 0), only its memory.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from .._view import NodeView
from ._base import POD_GPU_LABELS, ViewCollector, add, gauge, label_set, pod_labels


class PodGpuCollector(ViewCollector):
    def families(self, view: NodeView) -> list[Metric]:
        util = gauge("alnair_gpu_util", "SM utilisation of the pod's processes on this GPU, percent 0..100 "
                     "(NVML per-process).", POD_GPU_LABELS)
        mem_util = gauge("alnair_gpu_mem_util", "Memory-bandwidth utilisation of the pod's processes on this "
                         "GPU, percent 0..100 (NVML per-process).", POD_GPU_LABELS)
        used = gauge("alnair_pod_gpu_memory_used_bytes", "Device memory held by the pod's processes, bytes.",
                     POD_GPU_LABELS)
        procs = gauge("alnair_pod_gpu_processes", "Processes of the pod on this GPU.", POD_GPU_LABELS)
        for series in view.series:
            for g in series.gpus:
                labels = label_set(POD_GPU_LABELS, [*pod_labels(series.workload, view.node), g.gpu_uuid])
                if g.sm_utilization_ratio is not None:
                    add(util, labels, g.sm_utilization_ratio * 100.0)
                if g.memory_bandwidth_ratio is not None:
                    add(mem_util, labels, g.memory_bandwidth_ratio * 100.0)
                add(used, labels, float(g.memory_used_bytes))
                add(procs, labels, float(g.processes))
        return [util, mem_util, used, procs]
