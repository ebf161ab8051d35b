"""CUDA-level metrics from the interceptor's regions, next to their limits, per pod and GPU.

Seed names of the original exporter map to compliant ones: ``alnair_cuda_launch_kernel_cnt``
→ ``alnair_cuda_kernel_launches_total`` (a counter needs ``_total``), ``alnair_cuda_mem_used``
→ ``alnair_cuda_memory_used_bytes`` (base unit), ``alnair_cuda_available_token`` →
``alnair_cuda_available_tokens``. ``alnair_cuda_memory_limit_bytes`` is absent for a pod
without a memory limit, so ``used / limit`` only exists where a limit does.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from .._view import NodeView
from ._base import POD_GPU_LABELS, ViewCollector, counter, gauge, pod_labels


class CudaCollector(ViewCollector):
    def families(self, view: NodeView) -> list[Metric]:
        launches = counter("alnair_cuda_kernel_launches", "Kernel and graph launches of the pod.", POD_GPU_LABELS)
        used = gauge("alnair_cuda_memory_used_bytes", "Device memory the pod's processes hold through CUDA, bytes.",
                     POD_GPU_LABELS)
        limit = gauge("alnair_cuda_memory_limit_bytes", "The pod's device memory limit, bytes.", POD_GPU_LABELS)
        compute = gauge("alnair_cuda_compute_limit_ratio", "The pod's compute limit, share of one GPU 0..1.",
                        POD_GPU_LABELS)
        tokens = gauge("alnair_cuda_available_tokens", "Launch tokens left in the pod's compute bucket "
                       "(negative: in debt).", POD_GPU_LABELS)
        copies = counter("alnair_cuda_memcpy_bytes", "Bytes copied by direction (htod, dtoh, dtod).",
                         [*POD_GPU_LABELS, "direction"])
        throttled = counter("alnair_cuda_throttled_seconds", "Time launches waited for tokens.", POD_GPU_LABELS)
        period = gauge("alnair_cuda_launch_period_seconds", "Period of the repeating launch sequence (one "
                       "training iteration); 0 when none was found.", POD_GPU_LABELS)
        procs = gauge("alnair_cuda_processes", "Live processes of the pod using this GPU.", POD_GPU_LABELS)
        sm = gauge("alnair_cuda_sm_utilization_ratio", "The pod's SM utilisation as its interceptor last "
                   "measured it (for the compute limit), 0..1.", POD_GPU_LABELS)
        for series in view.series:
            for c in series.cuda:
                labels = [*pod_labels(series.workload, view.node), c.gpu_uuid]
                launches.add_metric(labels, float(c.kernel_launches_total))
                used.add_metric(labels, float(c.memory_used_bytes))
                if c.memory_limit_bytes is not None:
                    limit.add_metric(labels, float(c.memory_limit_bytes))
                compute.add_metric(labels, c.compute_limit_percent / 100.0)
                tokens.add_metric(labels, float(c.tokens_available))
                copies.add_metric([*labels, "htod"], float(c.memcpy_htod_bytes_total))
                copies.add_metric([*labels, "dtoh"], float(c.memcpy_dtoh_bytes_total))
                copies.add_metric([*labels, "dtod"], float(c.memcpy_dtod_bytes_total))
                throttled.add_metric(labels, c.throttled_seconds_total)
                period.add_metric(labels, c.launch_period_seconds)
                procs.add_metric(labels, float(c.processes))
                if c.sm_utilization_ratio is not None:
                    sm.add_metric(labels, c.sm_utilization_ratio)
        return [launches, used, limit, compute, tokens, copies, throttled, period, procs, sm]
