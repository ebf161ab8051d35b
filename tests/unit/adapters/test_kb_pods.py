"""Pod JSON → Workload and BindDecision validation (kube-bridge's edge), no servers."""

from __future__ import annotations

import pytest

from alnair.v1 import scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import PermanentError
from alnair_kube_bridge import is_alnair_pod, pod_workload
from alnair_kube_bridge._binder import Placement


def pod(**spec_extra) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"ai.centaurus.io/x": "1", "other/y": "2"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                          "uid": "j1"}]},
        "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"alnair/vgpu-memory": "8",
                                                   "alnair/vgpu-compute": "30"}}},
            {"name": "b", "resources": {"requests": {"alnair/vgpu-memory": "4"}}}],
            **spec_extra},
        "status": {"phase": "Pending"},
    }


def test_alnair_pods_are_recognised_by_scheduler_name_or_resources() -> None:
    assert is_alnair_pod(pod(), "alnair-scheduler")
    plain = {"spec": {"containers": [{"name": "c"}]}}
    assert not is_alnair_pod(plain, "alnair-scheduler")
    assert is_alnair_pod({"spec": {"schedulerName": "alnair-scheduler"}}, "alnair-scheduler")


def test_pod_workload_sums_requests_filters_annotations_and_maps_phase() -> None:
    w = pod_workload(pod())
    assert (w.request.memory_gib, w.request.compute_percent) == (12, 30)
    assert dict(w.annotations) == {"ai.centaurus.io/x": "1"}
    assert w.owners[0].kind == "Job" and w.phase == wl.WORKLOAD_PHASE_PENDING
    assert pod_workload(pod(nodeName="n1")).phase == wl.WORKLOAD_PHASE_BOUND
    assert pod_workload(pod(), deleted=True).phase == wl.WORKLOAD_PHASE_DELETED


def test_bad_annotation_and_fractional_quantity_are_reported_not_fatal() -> None:
    p = pod()
    p["metadata"]["annotations"]["ai.centaurus.io/gpu-assignment"] = "{not json"
    p["spec"]["containers"][0]["resources"]["limits"]["alnair/vgpu-memory"] = "1.5"
    w = pod_workload(p)
    assert not w.HasField("assignment")
    assert "gpu-assignment" in w.message and "'1.5' is not a whole number" in w.message
    assert w.request.memory_gib == 4


def test_placement_rejects_incomplete_or_impossible_decisions() -> None:
    d = scheduling_pb2.BindDecision()
    d.workload.name, d.workload.namespace = "p", "ns"
    with pytest.raises(PermanentError, match="workload.uid.*assignment.node.*assignment.gpu_uuid"):
        Placement.from_proto(d)
    d.workload.uid, d.assignment.node, d.assignment.gpu_uuid = "u", "n", "GPU-1"
    d.assignment.compute_percent = 250
    with pytest.raises(PermanentError, match="250 is outside 1..100"):
        Placement.from_proto(d)
    d.assignment.compute_percent = 30
    placed = Placement.from_proto(d)
    assert '"gpuUuid": "GPU-1"' in placed.assignment_json
