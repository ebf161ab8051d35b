"""What each pod was allocated per GPU (kubelet PodResources), beside what it uses."""

from __future__ import annotations

from prometheus_client.core import Metric

from .._view import NodeView
from ._base import POD_GPU_LABELS, ViewCollector, gauge


class AllocationCollector(ViewCollector):
    def families(self, view: NodeView) -> list[Metric]:
        memory = gauge("alnair_pod_gpu_allocated_memory_bytes", "alnair/vgpu-memory the kubelet allocated to "
                       "the pod on this GPU, bytes.", POD_GPU_LABELS)
        compute = gauge("alnair_pod_gpu_allocated_compute_ratio", "alnair/vgpu-compute the kubelet allocated "
                        "to the pod on this GPU, share of the GPU 0..1.", POD_GPU_LABELS)
        for s in view.allocations.shares:
            labels = [s.pod, s.namespace, view.node, s.gpu_uuid]
            if s.memory_bytes:  # a resource the pod did not ask for has no series (not a false 0)
                memory.add_metric(labels, float(s.memory_bytes))
            if s.compute_ratio:
                compute.add_metric(labels, s.compute_ratio)
        return [memory, compute]
