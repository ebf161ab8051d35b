"""Owner-level profiles land on the owner: profiler → bus → kube-bridge → a real batch/v1 Job
(and the other owner kinds kube-bridge may annotate), with the bridge holding only its RBAC
rights. The pod is a real pod owned by the Job; its lifecycle reaches the profiler through
the bridge's watch, its samples through the bus as the exporter publishes them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from kb_support import alnair_pod
from kubernetes import client as k8s
from test_kb_commands import result_of

from alnair.v1 import commands_pb2, common_pb2, metrics_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.mongo import MongoDatabase
from alnair_profiler import ProfilerService, ProfilerSettings

PREFIX = "ai.centaurus.io/"


def _ts(when: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(when)
    return out


def _job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"suspend": True, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}


async def _samples(bus: Bus, uid: str, t0: datetime) -> None:
    """What the exporter would publish for the pod: host usage and interceptor copy counters
    (1 GB/s host→device, 0.25 GB/s device→host, 2 GB/s on the card)."""
    for k in range(6):
        when = _ts(t0 + timedelta(seconds=k))
        batch = metrics_pb2.NodeSampleBatch(node="node-1", sampled_at=when)
        batch.hosts.append(metrics_pb2.HostSample(workload=common_pb2.WorkloadRef(uid=uid),
                                                  cpu_cores=0.5 + 0.25 * k, memory_bytes=2**30))
        await bus.publish(subjects.gpu_metrics("node-1"), batch)
        await bus.publish(subjects.cuda_metrics("node-1", uid), metrics_pb2.CudaSample(
            workload=common_pb2.WorkloadRef(uid=uid), node="node-1", gpu_uuid="GPU-1", sampled_at=when,
            memory_used_bytes=2**30, memcpy_htod_bytes_total=k * 10**9,
            memcpy_dtoh_bytes_total=k * 25 * 10**7, memcpy_dtod_bytes_total=k * 2 * 10**9))
    await bus.nc.flush()


async def test_job_owner_gets_the_profile_annotations_by_direction(
    nats_server: NatsServer, bus: Bus, kube: KubeNamespace, mongo: MongoDatabase, start_bridge,
    bridge_kubeconfig: Path, tmp_path: Path,
) -> None:
    await start_bridge(bridge_kubeconfig)
    batch_api = k8s.BatchV1Api(kube.api_client)
    job = batch_api.create_namespaced_job(kube.namespace, _job("sweep"))
    pod = alnair_pod("sweep-0")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "sweep",
                                           "uid": job.metadata.uid, "controller": True}]
    uid = kube.core.create_namespaced_pod(kube.namespace, pod).metadata.uid

    settings = ProfilerSettings(nats_url=nats_server.url, node_name="node-1", data_dir=tmp_path / "profiler",
                                mongo_url=mongo.url, mongo_database=mongo.name,
                                checkpoint_interval_seconds=0.2, retry_interval_seconds=0.2)
    profiler = ProfilerService(settings)
    task = asyncio.create_task(profiler.run())
    try:
        async def pending_seen() -> bool:
            if task.done():
                task.result()
            state = profiler.states.get(uid)
            return state is not None and state.info is not None

        await wait_for(pending_seen, timeout=30, what="the profiler saw the pod's Pending event")
        started = datetime.now(UTC).replace(microsecond=0)
        await _samples(bus, uid, started)

        async def samples_in() -> bool:
            state = profiler.states.get(uid)
            series = state.series if state else {}
            return all(name in series and series[name].count == n for name, n in
                       (("cpu_cores", 6), ("memcpy_htod_bytes_per_second", 5)))

        await wait_for(samples_in, timeout=10, what="the profiler took the samples")
        finished = started + timedelta(seconds=6)
        kube.core.patch_namespaced_pod_status("sweep-0", kube.namespace, {"status": {
            "phase": "Succeeded", "startTime": started.isoformat().replace("+00:00", "Z"),
            "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "", "ready": False,
                                   "restartCount": 0, "state": {"terminated": {
                                       "exitCode": 0, "finishedAt": finished.isoformat().replace("+00:00", "Z")}}}]}})

        async def job_annotated() -> dict | None:
            found = batch_api.read_namespaced_job("sweep", kube.namespace).metadata.annotations or {}
            return found if f"{PREFIX}profiled-workloads" in found else None

        annotations = await wait_for(job_annotated, timeout=30, what="owner annotations on the Job")
    finally:
        profiler.request_stop()
        await asyncio.wait_for(task, 30)

    assert annotations[f"{PREFIX}profiled-workloads"] == "1"
    assert float(annotations[f"{PREFIX}max-cpu-cores"]) == pytest.approx(1.75)
    assert float(annotations[f"{PREFIX}max-memory-bytes"]) == pytest.approx(2**30, rel=1e-5)
    assert float(annotations[f"{PREFIX}max-memcpy-htod-bytes-per-second"]) == pytest.approx(1e9)
    assert float(annotations[f"{PREFIX}max-memcpy-dtoh-bytes-per-second"]) == pytest.approx(2.5e8)
    assert float(annotations[f"{PREFIX}max-memcpy-dtod-bytes-per-second"]) == pytest.approx(2e9)
    assert float(annotations[f"{PREFIX}max-memcpy-bytes-per-second"]) == pytest.approx(3.25e9)
    # The pod gets its own profile annotations too: a separate command from the Job's, so it
    # may land after it.
    async def pod_annotated() -> dict | None:
        found = kube.core.read_namespaced_pod("sweep-0", kube.namespace).metadata.annotations or {}
        return found if f"{PREFIX}max-memcpy-dtod-bytes-per-second" in found else None

    on_pod = await wait_for(pod_annotated, timeout=30, what="profile annotations on the pod")
    assert float(on_pod[f"{PREFIX}max-memcpy-dtod-bytes-per-second"]) == pytest.approx(2e9)
    owner = mongo.db["workload_profiles_owners"].find_one({"_id": job.metadata.uid})
    assert owner["kind"] == "Job" and owner["maxima"]["memcpy_htod_bytes_per_second"] == pytest.approx(1e9)


async def test_statefulset_and_replicaset_owners_are_annotated_others_refused(
    bus: Bus, kube: KubeNamespace, start_bridge, bridge_kubeconfig: Path,
) -> None:
    await start_bridge(bridge_kubeconfig)
    apps = k8s.AppsV1Api(kube.api_client)
    labels = {"app": "x"}
    template = {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    apps.create_namespaced_stateful_set(kube.namespace, {
        "metadata": {"name": "db"}, "spec": {"serviceName": "db", "replicas": 0,
                                             "selector": {"matchLabels": labels}, "template": template}})
    apps.create_namespaced_replica_set(kube.namespace, {
        "metadata": {"name": "web-abc"}, "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                                                  "template": template}})
    apps.create_namespaced_deployment(kube.namespace, {
        "metadata": {"name": "web"}, "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                                              "template": template}})

    def ref(api_version: str, kind: str, name: str) -> commands_pb2.ObjectRef:
        return commands_pb2.ObjectRef(api_version=api_version, kind=kind, namespace=kube.namespace, name=name)

    for command_id, obj in (("sts", ref("apps/v1", "StatefulSet", "db")),
                            ("rs", ref("apps/v1", "ReplicaSet", "web-abc")),
                            ("deploy", ref("apps/v1", "Deployment", "web"))):
        await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
            command_id=command_id, object=obj, annotations={f"{PREFIX}max-cpu-cores": "2"}))
    assert (await result_of(bus, "sts")).ok and (await result_of(bus, "rs")).ok
    refused = await result_of(bus, "deploy")
    assert not refused.ok and refused.permanent and "apps/v1 Deployment" in refused.reason
    assert apps.read_namespaced_stateful_set("db", kube.namespace).metadata.annotations[
        f"{PREFIX}max-cpu-cores"] == "2"
    assert apps.read_namespaced_replica_set("web-abc", kube.namespace).metadata.annotations[
        f"{PREFIX}max-cpu-cores"] == "2"
    assert f"{PREFIX}max-cpu-cores" not in (
        apps.read_namespaced_deployment("web", kube.namespace).metadata.annotations or {})

    # Status updates stay for Alnair's own resources.
    await bus.publish(subjects.cmd_status(), commands_pb2.StatusUpdateCommand(
        command_id="sts-status", object=ref("apps/v1", "StatefulSet", "db"), status_json="{}"))
    assert "alnair.centaurus.io resources" in (await result_of(bus, "sts-status")).reason
