"""The ``kwok_nodes`` fixture gives real Node objects that kwok keeps Ready, and pods bound
to them through the Binding API go Running, then finish when the test says so."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from alnair_common.testing import wait_until
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes


def _gpu_pod(name: str) -> dict:
    limits = {"alnair/vgpu-memory": "8", "alnair/vgpu-compute": "30"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": "alnair-scheduler",
                 "containers": [{"name": "train", "image": "pytorch/pytorch:2.4.0",
                                 "resources": {"limits": limits, "requests": limits}}]},
    }


def test_gpu_node_is_ready_with_vgpu_capacity(kwok_nodes: KwokNodes,
                                              kube: KubeNamespace) -> None:
    [name] = kwok_nodes(count=1, gpus_per_node=1, gpu_memory_gib=80)

    node = kube.core.read_node(name)
    ready = {c.type: c.status for c in node.status.conditions}
    assert ready["Ready"] == "True"
    for resources in (node.status.capacity, node.status.allocatable):
        assert resources["alnair/vgpu-memory"] == "80"
        assert resources["alnair/vgpu-compute"] == "100"


def test_several_multi_gpu_nodes(kwok_nodes: KwokNodes, kube: KubeNamespace) -> None:
    names = kwok_nodes(count=3, gpus_per_node=4, gpu_memory_gib=24)

    assert len(set(names)) == 3
    for name in names:
        capacity = kube.core.read_node(name).status.capacity
        assert (capacity["alnair/vgpu-memory"], capacity["alnair/vgpu-compute"]) == ("96", "400")


@pytest.mark.parametrize("succeeded", [True, False])
def test_bound_pod_runs_then_finishes(kwok_nodes: KwokNodes, kube: KubeNamespace,
                                      succeeded: bool) -> None:
    [node] = kwok_nodes(count=1, gpus_per_node=1, gpu_memory_gib=80)
    core = kube.core
    core.create_namespaced_pod(kube.namespace, _gpu_pod("job"))

    binding = k8s.V1Binding(metadata=k8s.V1ObjectMeta(name="job"),
                            target=k8s.V1ObjectReference(api_version="v1", kind="Node",
                                                         name=node))
    response = core.create_namespaced_binding(kube.namespace, binding,
                                              _preload_content=False)
    assert response.status == 201
    response.release_conn()

    running = kwok_nodes.wait_for_phase(kube.namespace, "job", "Running")
    assert running.spec.node_name == node
    assert running.status.pod_ip
    assert running.status.container_statuses[0].state.running is not None

    kwok_nodes.finish(kube.namespace, "job", succeeded=succeeded)
    phase = "Succeeded" if succeeded else "Failed"
    finished = kwok_nodes.wait_for_phase(kube.namespace, "job", phase)
    assert finished.status.container_statuses[0].state.terminated.exit_code == (
        0 if succeeded else 1)


def test_deleting_a_running_pod_removes_it(kwok_nodes: KwokNodes,
                                           kube: KubeNamespace) -> None:
    [node] = kwok_nodes()
    kube.core.create_namespaced_pod(kube.namespace, _gpu_pod("doomed"))
    kwok_nodes.bind(kube.namespace, "doomed", node)
    kwok_nodes.wait_for_phase(kube.namespace, "doomed", "Running")

    kube.core.delete_namespaced_pod("doomed", kube.namespace)  # default 30 s grace

    def gone() -> bool:
        try:
            kube.core.read_namespaced_pod("doomed", kube.namespace)
        except ApiException as e:
            return e.status == 404
        return False

    wait_until(gone, timeout=20, what="pod doomed deleted by kwok")
