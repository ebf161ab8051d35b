"""CUDA-level metrics from the interceptor's regions, next to their limits, per pod and GPU.

Seed names of the original exporter map to compliant ones: ``alnair_cuda_launch_kernel_cnt``
→ ``alnair_cuda_kernel_launches_total`` (a counter needs ``_total``), ``alnair_cuda_mem_used``
→ ``alnair_cuda_memory_used_bytes`` (base unit), ``alnair_cuda_available_token`` →
``alnair_cuda_available_tokens``. ``alnair_cuda_memory_limit_bytes`` is absent for a pod
without a memory limit, so ``used / limit`` only exists where a limit does;
``alnair_cuda_training_kernel_launches_total`` likewise only where kernel names were read.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from .._view import NodeView
from ._base import POD_GPU_LABELS, ViewCollector, add, counter, gauge, label_set, pod_labels


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
        training = counter("alnair_cuda_training_kernel_launches", "Launches of the pod's kernels named like "
                           "training (backward, multi_tensor_apply); absent where the interceptor read no kernel "
                           "names.", POD_GPU_LABELS)
        for series in view.series:
            for c in series.cuda:
                values = [*pod_labels(series.workload, view.node), c.gpu_uuid]
                labels = label_set(POD_GPU_LABELS, values)
                add(launches, labels, float(c.kernel_launches_total))
                add(used, labels, float(c.memory_used_bytes))
                if c.memory_limit_bytes is not None:
                    add(limit, labels, float(c.memory_limit_bytes))
                add(compute, labels, c.compute_limit_percent / 100.0)
                add(tokens, labels, float(c.tokens_available))
                for direction, total in (("htod", c.memcpy_htod_bytes_total), ("dtoh", c.memcpy_dtoh_bytes_total),
                                         ("dtod", c.memcpy_dtod_bytes_total)):
                    add(copies, {**labels, "direction": direction}, float(total))
                add(throttled, labels, c.throttled_seconds_total)
                add(period, labels, c.launch_period_seconds)
                add(procs, labels, float(c.processes))
                if c.sm_utilization_ratio is not None:
                    add(sm, labels, c.sm_utilization_ratio)
                if c.kernel_names_read:
                    add(training, labels, float(c.training_kernel_launches_total))
        return [launches, used, limit, compute, tokens, copies, throttled, period, procs, sm, training]
