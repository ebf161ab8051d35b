"""The Dataset tests' side: Dataset objects (as kubectl makes them), pods that read them, and
the cache's subjects on the bus."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kb_support import stream_messages
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from alnair.v1 import cache_pb2
from alnair_common import Bus, subjects
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace

GROUP, VERSION, PLURAL = "alnair.centaurus.io", "v1", "datasets"
SPEC = {"source": "file:///data/imagenet"}


class Datasets:
    def __init__(self, kube: KubeNamespace, bus: Bus) -> None:
        self.kube, self.bus, self.ns = kube, bus, kube.namespace
        self.api = k8s.CustomObjectsApi(kube.api_client)

    def create(self, name: str, spec: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Dataset",
                "metadata": {"name": name}, "spec": copy.deepcopy(spec or SPEC)}
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body, **kwargs)

    def patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.api.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, patch)

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    async def requests(self) -> list[cache_pb2.CacheDatasetRequest]:
        found = await stream_messages(self.bus, "CACHE", subjects.cache_requests(),
                                      cache_pb2.CacheDatasetRequest)
        return [r for r in found if (r.add.namespace if r.HasField("add") else r.remove.namespace) == self.ns]

    async def wait_requests(self, count: int, name: str | None = None) -> list[cache_pb2.CacheDatasetRequest]:
        async def probe() -> tuple[list[cache_pb2.CacheDatasetRequest]] | None:
            found = [r for r in await self.requests()
                     if name is None or (r.add.name if r.HasField("add") else r.remove.name) == name]
            return (found,) if len(found) >= count else None
        return (await wait_for(probe, timeout=20, what=f"{count} cache requests"))[0]

    async def wait_status(self, name: str, check: Callable[[dict[str, Any]], bool], what: str,
                          timeout: float = 20) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            obj = self.get(name)
            return obj if obj is not None and check(obj.get("status") or {}) else None
        return await wait_for(probe, timeout=timeout, what=what)

    async def wait_gone(self, name: str) -> None:
        async def probe() -> bool:
            return self.get(name) is None
        await wait_for(probe, timeout=30, what=f"Dataset {name} gone")


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in status.get("conditions") or []}


def reading_pod(name: str, node: str, annotations: dict[str, str],
                host_paths: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod placed on ``node`` (kwok runs it) that reads data sets by ``annotations``."""
    volumes = [{"name": volume, "hostPath": {"path": path}} for volume, path in (host_paths or {}).items()]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": node, "volumes": volumes,
                     "containers": [{"name": "main", "image": "busybox",
                                     "volumeMounts": [{"name": v["name"], "mountPath": f"/data/{v['name']}"}
                                                      for v in volumes]}]}}


def pod_events(kube: KubeNamespace, pod: str) -> list[k8s.CoreV1Event]:
    return [e for e in kube.core.list_namespaced_event(kube.namespace).items
            if e.involved_object.kind == "Pod" and e.involved_object.name == pod]


async def wait_event(kube: KubeNamespace, pod: str, reason: str) -> k8s.CoreV1Event:
    async def probe() -> k8s.CoreV1Event | None:
        return next((e for e in pod_events(kube, pod) if e.reason == reason), None)
    return await wait_for(probe, timeout=20, what=f"Event {reason} on pod {pod}")
