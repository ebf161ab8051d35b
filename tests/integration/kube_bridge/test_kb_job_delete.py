"""Deleting a training job that already finished removes what its end kept: the real
elastic-job controller in-process, kube-bridge with only its RBAC rights against the real
apiserver, kwok nodes running the worker pods, a real nats-server.

A finished job's worker pods stay for their logs (the workers Service goes with
``propagationPolicy: Orphan``, the gang's rendezvous pod, Service and PodGroup go at target
0). ``alnair job delete`` (a JobCommand delete) or ``kubectl delete trainingjob`` then has
the controller publish one last plan, phase Deleted and target 0, before it forgets the job,
and kube-bridge deletes the pods. The test plane runs no garbage collector, so nothing but
that plan removes them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ej_support import running_controller
from kubernetes import client as k8s
from test_kb_trainingjobs import Jobs
from test_kb_workers import gang_objects, settled, wait_workers, workers

import alnair_elastic_job as ej
from alnair.v1 import job_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes
from alnair_kube_bridge._job_objects import gang_name

IMAGE = "ghcr.io/example/train:1"
CARD = ej.FreeCard("kwok", "GPU-0", 80)


@pytest.fixture
async def controller(nats_server: NatsServer) -> AsyncIterator[ej.ElasticJobService]:
    async with running_controller(nats_server.url, [CARD]) as service:  # one card: a gang of one worker
        yield service


async def _phase(service: ej.ElasticJobService, key: str, phase: ej.Phase) -> bool:
    t = service.controller.jobs.get(key)
    return t is not None and t.status.phase is phase


async def _started(service: ej.ElasticJobService, key: str) -> bool:
    t = service.controller.jobs.get(key)
    return t is not None and len(t.status.started) == 1


def _going(kube: KubeNamespace, service: str) -> bool:
    """The Service is gone, or being deleted: the plane runs no garbage collector, which is
    what finishes a delete with ``propagationPolicy: Orphan``."""
    try:
        found = kube.core.read_namespaced_service(service, kube.namespace)
    except k8s.ApiException as e:
        if e.status == 404:
            return True
        raise
    return found.metadata.deletion_timestamp is not None


@pytest.mark.parametrize("how", ["alnair job delete", "kubectl delete trainingjob"])
async def test_a_finished_jobs_pods_are_kept_until_it_is_deleted_then_removed(
        how: str, bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path,
        bind_jobs_role, start_bridge, controller: ej.ElasticJobService) -> None:
    bind_jobs_role()
    await start_bridge(bridge_kubeconfig)
    ns, name = kube.namespace, "resnet"
    key = ej.job_key(ns, name)
    jobs = Jobs(kube, bus)
    if how == "kubectl delete trainingjob":
        jobs.create(name, {"image": IMAGE, "command": ["python", "train.py"], "minReplicas": 1,
                           "maxReplicas": 1, "worker": {"gpuMemoryGiB": 8, "gpuComputePercent": 30}})
    else:  # what `alnair job submit` sends
        spec = ej.to_proto(ej.TrainingJob(name, ("python", "train.py"), 1, 1, ej.WorkerRequest(8, 30),
                                          namespace=ns, image=IMAGE))
        request = uuid.uuid4().hex
        await bus.publish(subjects.job_command(name), job_pb2.JobCommand(
            name=name, namespace=ns, submit=spec, request_id=request), msg_id=f"job:{request}")

    [pod] = await wait_workers(kube, 1)
    rendezvous = pod.metadata.labels["ai.centaurus.io/rendezvous-id"]
    gang = gang_name(name, rendezvous)
    [node] = kwok_nodes(1, gpus_per_node=1, gpu_memory_gib=80)
    kwok_nodes.bind(ns, pod.metadata.name, node)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, pod.metadata.name, "Running")
    await wait_for(lambda: _started(controller, key), timeout=30, what="the worker started")
    await settled(bus)  # the plans up to now carried out before the worker ends
    kwok_nodes.finish(ns, pod.metadata.name, succeeded=True)
    await wait_for(lambda: _phase(controller, key, ej.Phase.SUCCEEDED), timeout=30, what="the job Succeeded")

    async def ended() -> bool:  # the Succeeded plan carried out
        return gang_objects(kube, gang) == (False, False, False) and _going(kube, f"{name}-workers")
    await wait_for(ended, timeout=30, what="the gang's objects and the workers Service removed")
    await settled(bus)
    assert [p.metadata.uid for p in workers(kube, name)] == [pod.metadata.uid], "the finished pod is kept"

    if how == "kubectl delete trainingjob":
        jobs.delete(name)
        await jobs.wait_gone(name)
    else:  # what `alnair job delete` sends
        request = uuid.uuid4().hex
        await bus.publish(subjects.job_command(name), job_pb2.JobCommand(
            name=name, namespace=ns, delete=True, request_id=request), msg_id=f"job:{request}")

    async def removed() -> bool:
        return workers(kube, name) == []
    await wait_for(removed, timeout=30, what="the finished job's worker pod deleted")
    records = await TypedKV.open(bus, "training_jobs", job_pb2.TrainingJobRecord)
    assert key not in controller.controller.jobs and await records.get(f"{ns}.{name}") is None
    assert gang_objects(kube, gang) == (False, False, False)
    assert _going(kube, f"{name}-workers")
    # Nothing of the job is left under its labels either (pods, Services, PodGroups).
    selector = f"ai.centaurus.io/training-job-gang={name}"
    assert kube.core.list_namespaced_pod(ns, label_selector=selector).items == []
    assert kube.core.list_namespaced_service(ns, label_selector=selector).items == []
    groups = k8s.CustomObjectsApi(kube.api_client).list_namespaced_custom_object(
        "alnair.centaurus.io", "v1alpha1", ns, "podgroups", label_selector=selector)
    assert groups["items"] == []
