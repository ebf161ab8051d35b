"""A training job's pods on a node that goes away are deleted at once and reach the
controller as lost workers (real apiserver, kwok nodes, real nats-server); the job's pods
tolerate a node that stops answering for 30 s, not Kubernetes' default 300 s."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kb_support import workload_events
from kubernetes import client as k8s
from test_kb_workers import plan, send, wait_workers

from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes
from alnair_elastic_job import WorkerExited, job_key, worker_input
from alnair_kube_bridge._job_objects import NODE_LOSS_TOLERATION_SECONDS, gang_name


async def test_a_deleted_nodes_job_pods_are_deleted_and_counted_as_lost_workers(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path, bind_jobs_role,
        start_bridge) -> None:
    bind_jobs_role()
    await start_bridge(bridge_kubeconfig)
    ns = kube.namespace
    p = plan(ns, 1, target=2, gang_min=2)
    await send(bus, p)
    pods = await wait_workers(kube, 2)
    for pod in pods:  # both kinds of job pod tolerate a lost node for 30 s only
        tolerations = {(t.key, t.effect, t.toleration_seconds) for t in pod.spec.tolerations}
        assert {("node.kubernetes.io/not-ready", "NoExecute", NODE_LOSS_TOLERATION_SECONDS),
                ("node.kubernetes.io/unreachable", "NoExecute", NODE_LOSS_TOLERATION_SECONDS)} <= tolerations
    host = kube.core.read_namespaced_pod(gang_name("resnet", p.rendezvous_id), ns)
    assert any(t.key == "node.kubernetes.io/unreachable" and t.toleration_seconds == NODE_LOSS_TOLERATION_SECONDS
               for t in host.spec.tolerations)
    keep, lose = kwok_nodes(2, gpus_per_node=1, gpu_memory_gib=80)
    kwok_nodes.bind(ns, pods[0].metadata.name, keep)
    kwok_nodes.bind(ns, pods[1].metadata.name, lose)
    for pod in pods:
        await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, pod.metadata.name, "Running")
    # An unmanaged pod on the same node is not the bridge's to delete.
    kube.core.create_namespaced_pod(ns, {"metadata": {"name": "bystander"}, "spec": {
        "nodeName": lose, "containers": [{"name": "c", "image": "busybox"}],
        "tolerations": [{"operator": "Exists"}]}})
    await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, "bystander", "Running")

    kube.core.delete_node(lose)

    async def lost() -> list[wl.WorkloadEvent]:
        return [e for e in await workload_events(bus)
                if e.workload.phase == wl.WORKLOAD_PHASE_DELETED and e.workload.ref.uid == pods[1].metadata.uid]
    [event] = await wait_for(lost, timeout=30, what="the lost worker's deleted event")
    key, fact = worker_input(event)
    assert key == job_key(ns, "resnet")
    assert isinstance(fact, WorkerExited) and fact.worker == pods[1].metadata.uid and fact.code is None
    remaining = {q.metadata.uid for q in kube.core.list_namespaced_pod(ns).items}
    assert pods[0].metadata.uid in remaining, "the worker on the node that stayed was touched"
    assert "bystander" in {q.metadata.name for q in kube.core.list_namespaced_pod(ns).items}


async def test_a_node_that_went_while_the_bridge_was_down_is_found_on_its_relist(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path, bind_jobs_role,
        start_bridge) -> None:
    bind_jobs_role()
    bridge = await start_bridge(bridge_kubeconfig)
    ns = kube.namespace
    await send(bus, plan(ns, 1, target=1, gang_min=1))
    [pod] = await wait_workers(kube, 1)
    [node] = kwok_nodes(1, gpus_per_node=1, gpu_memory_gib=80)
    kwok_nodes.bind(ns, pod.metadata.name, node)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, pod.metadata.name, "Running")
    await bridge.stop()
    # kwok would take the node's pods with it only through a kubelet-like delete; a node
    # removed while its pods stay bound is what a cluster without pod GC keeps.
    kube.core.delete_node(node)
    assert [q.metadata.uid for q in kube.core.list_namespaced_pod(ns).items
            if q.metadata.uid == pod.metadata.uid], "the pod went with its node before the bridge came back"
    await start_bridge(bridge_kubeconfig)

    async def gone() -> bool:
        try:
            got = kube.core.read_namespaced_pod(pod.metadata.name, ns)
        except k8s.ApiException as e:
            return e.status == 404
        return got.metadata.uid != pod.metadata.uid
    await wait_for(gone, timeout=30, what="the pod of the node that went while the bridge was down deleted")
