"""Helpers of the kube-bridge tests: run the bridge in-process against the real plane (and,
from tests/integration/elastic_job's ej_support, the controller beside it)."""

from __future__ import annotations

import asyncio
import base64
import copy
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_kube_bridge import KubeBridgeService, KubeBridgeSettings
from alnair_kube_bridge._job_workers import JOBS_ROLE

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "elastic_job"))
RBAC = REPO / "k8s" / "base" / "rbac" / "kube-bridge.yaml"


@dataclass
class RunningBridge:
    service: KubeBridgeService
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.service.request_stop()
        await asyncio.wait_for(self.task, 30)


BridgeFactory = Callable[..., Any]


@pytest.fixture
async def start_bridge(nats_server: NatsServer, kube: KubeNamespace,
                       tmp_path: Path) -> AsyncIterator[BridgeFactory]:
    """``await start_bridge(kubeconfig=None)``: a ready bridge scoped to the test namespace."""
    running: list[RunningBridge] = []

    async def start(kubeconfig: Path | None = None) -> RunningBridge:
        settings = KubeBridgeSettings(
            nats_url=nats_server.url, kubeconfig=kubeconfig or kube.kubeconfig,
            watch_namespace=kube.namespace, watch_timeout_seconds=5, node_name="test",
            data_dir=tmp_path)
        service = KubeBridgeService(settings)
        task = asyncio.create_task(service.run())
        bridge = RunningBridge(service, task)
        running.append(bridge)

        async def ready() -> bool:
            if task.done():
                task.result()
            report = await service.health.report() if service.ready.is_set() else None
            return bool(report and report.ready)

        await wait_for(ready, timeout=30, what="kube-bridge ready")
        return bridge

    try:
        yield start
    finally:
        for bridge in running:
            if not bridge.task.done():
                await bridge.stop()


@pytest.fixture
def bridge_kubeconfig(kube: KubeNamespace, tmp_path: Path) -> Iterator[Path]:
    """Apply k8s/base/rbac/kube-bridge.yaml for a service account of the test namespace and
    write a kubeconfig that authenticates as it (a TokenRequest token): the bridge then runs
    with exactly the rights the manifest grants."""
    rbac = k8s.RbacAuthorizationV1Api(kube.api_client)
    try:
        yield _service_account_kubeconfig(kube, tmp_path)
    finally:
        for role in ("alnair-kube-bridge", "alnair-kube-bridge-datasets"):  # the bound ones
            rbac.delete_cluster_role_binding(f"{role}-{kube.namespace}")
            rbac.delete_cluster_role(f"{role}-{kube.namespace}")


def _service_account_kubeconfig(kube: KubeNamespace, tmp_path: Path) -> Path:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    rbac = k8s.RbacAuthorizationV1Api(kube.api_client)
    suffix = kube.namespace
    for doc in docs:
        doc = copy.deepcopy(doc)
        if doc["kind"] == "ServiceAccount":
            doc["metadata"]["namespace"] = kube.namespace
            kube.core.create_namespaced_service_account(kube.namespace, doc)
        elif doc["kind"] == "ClusterRole":
            doc["metadata"]["name"] += f"-{suffix}"
            rbac.create_cluster_role(doc)
        elif doc["kind"] == "ClusterRoleBinding":
            doc["metadata"]["name"] += f"-{suffix}"
            doc["roleRef"]["name"] += f"-{suffix}"
            doc["subjects"][0]["namespace"] = kube.namespace
            rbac.create_cluster_role_binding(doc)
    token = kube.core.create_namespaced_service_account_token(
        "kube-bridge", kube.namespace,
        {"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}},
    ).status.token
    plane = kube.plane
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "t", "cluster": {
            "server": plane.server,
            "certificate-authority-data": base64.b64encode(
                plane.pki.ca_cert.read_bytes()).decode()}}],
        "users": [{"name": "kube-bridge", "user": {"token": token}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "kube-bridge",
                                               "namespace": kube.namespace}}],
        "current-context": "t",
    }
    path = tmp_path / "kube-bridge.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def bind_jobs_role(kube: KubeNamespace, bridge_kubeconfig: Path) -> Iterator[Callable[[], None]]:
    """Bind the training-jobs ClusterRole (made with the bridge's RBAC) in the test namespace,
    as an operator does for each namespace that runs training jobs. Ask for it before
    ``start_bridge``, so that the role goes after the bridges stopped."""
    rbac = k8s.RbacAuthorizationV1Api(kube.api_client)
    role = f"{JOBS_ROLE}-{kube.namespace}"

    def bind() -> None:
        rbac.create_namespaced_role_binding(kube.namespace, {
            "metadata": {"name": "alnair-training-jobs"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "kube-bridge", "namespace": kube.namespace}]})

    try:
        yield bind
    finally:
        rbac.delete_cluster_role(role)
