"""The admission webhook in-process against the real control plane and a secured bus.

The MutatingWebhookConfiguration is the one in k8s/base/services/admission-webhook.yaml,
named per test and pointed at the webhook on loopback (``clientConfig.url``), limited to the
test's namespace, and with failurePolicy Fail: a webhook that does not answer makes the
create fail here, instead of passing unnoticed as Ignore would in a cluster.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from alnair.v1 import cache_pb2
from alnair_admission_webhook import AdmissionWebhookService, AdmissionWebhookSettings
from alnair_common import TypedKV
from alnair_common.natsd import free_port
from alnair_common.testing import wait_for
from alnair_common.testing.bus_fixtures import SecuredNats
from alnair_common.testing.dataplane import dataplane_bin, s3_server  # noqa: F401 — fixtures
from alnair_common.testing.kube import KubeNamespace

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "k8s" / "base" / "services" / "admission-webhook.yaml"
TIER_URL = "redis://cache.test:6379/0"
SECRET = "alnair-admission-webhook-tls"  # the name the Role grants


def manifest(kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return copy.deepcopy(next(d for d in docs if d["kind"] == kind))


@dataclass
class Webhook:
    """The webhook's configuration on the plane and its running instances."""

    kube: KubeNamespace
    nats: SecuredNats
    port: int
    configuration: str
    workdir: Path
    running: list[tuple[AdmissionWebhookService, asyncio.Task[None]]]
    overrides: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> AdmissionWebhookSettings:
        return AdmissionWebhookSettings(**{**self.base_settings(), **self.overrides})

    def base_settings(self) -> dict[str, Any]:
        return dict(
            nats_url=self.nats.server.url,
            nats_credentials=self.nats.credentials.seed_file("admission-webhook"),
            kubeconfig=self.kube.kubeconfig, node_name="test", data_dir=self.workdir,
            listen_port=self.port, webhook_namespace=self.kube.namespace, tls_secret=SECRET,
            webhook_configuration=self.configuration, tls_extra_names="127.0.0.1",
            pod_tier_url=TIER_URL)

    async def start(self) -> AdmissionWebhookService:
        service = AdmissionWebhookService(self.settings())
        task = asyncio.create_task(service.run())
        self.running.append((service, task))

        async def ready() -> bool:
            if task.done():
                task.result()
            return service.ready.is_set()

        await wait_for(ready, timeout=30, what="admission webhook ready")
        return service

    async def stop(self, service: AdmissionWebhookService) -> None:
        for entry in list(self.running):
            if entry[0] is service:
                service.request_stop()
                await asyncio.wait_for(entry[1], 30)
                self.running.remove(entry)

    def registered(self) -> dict[str, Any]:
        api = k8s.AdmissionregistrationV1Api(self.kube.api_client)
        return self.kube.api_client.sanitize_for_serialization(
            api.read_mutating_webhook_configuration(self.configuration))

    async def create_pod(self, pod: dict[str, Any], *, timeout: float = 15.0) -> tuple[dict[str, Any], str]:
        """Create ``pod`` with kubectl (as a user would), in a thread: the webhook answers on
        this event loop. The stored pod and kubectl's stderr (where the API server's
        warnings are printed)."""
        return await asyncio.to_thread(self._create_pod, pod, timeout)

    def _create_pod(self, pod: dict[str, Any], timeout: float) -> tuple[dict[str, Any], str]:
        """The API server picks up a new caBundle within about a second: until then a call
        fails TLS and is retried."""
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                [str(self.kube.plane.testbin.path("kubectl")), f"--kubeconfig={self.kube.kubeconfig}",
                 "create", "-o", "json", "-f", "-"], input=json.dumps(pod), capture_output=True,
                text=True, timeout=60)
            if done.returncode == 0:
                return yaml.safe_load(done.stdout), done.stderr
            if "failed calling webhook" not in done.stderr or time.monotonic() > deadline:
                raise AssertionError(f"kubectl create failed: {done.stderr.strip()}")
            time.sleep(0.2)


async def put_status(nats: SecuredNats, namespace: str, name: str, source: str,
                     phase: int = cache_pb2.CACHE_PHASE_READY) -> None:
    """What the cache hydrator writes for a data set (with its own bus identity)."""
    bus = await nats.connect("cache-hydrator")
    kv = await TypedKV.open(bus, "cache_datasets", cache_pb2.CacheDatasetStatus)
    spec = cache_pb2.CacheDatasetSpec(name=name, namespace=namespace, source=source)
    await kv.put(f"{namespace}.{name}", cache_pb2.CacheDatasetStatus(
        dataset=name, namespace=namespace, source=source, phase=phase, spec=spec))


@pytest.fixture
async def webhook(kube: KubeNamespace, secured_nats: SecuredNats,
                  tmp_path: Path) -> AsyncIterator[Webhook]:
    port = free_port()
    config = manifest("MutatingWebhookConfiguration")
    config["metadata"]["name"] = name = f"alnair-aw-{kube.namespace}"
    hook = config["webhooks"][0]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/mutate"}
    hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": kube.namespace}}
    hook["failurePolicy"] = "Fail"
    hook["timeoutSeconds"] = 10
    admission = k8s.AdmissionregistrationV1Api(kube.api_client)
    admission.create_mutating_webhook_configuration(config)
    state = Webhook(kube, secured_nats, port, name, tmp_path / "webhook", [])
    try:
        yield state
    finally:
        for service, task in state.running:
            service.request_stop()
            await asyncio.wait_for(task, 30)
        admission.delete_mutating_webhook_configuration(name)


Pod = Callable[..., dict[str, Any]]


def pod_manifest(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    spec.setdefault("containers", [{"name": "train", "image": "trainer:1"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
