"""End-to-end harness: the real control plane with kwok GPU nodes, kube-bridge and the
scheduler in-process, and the test as the device plugin of the kwok nodes (they run no
plugin, so the test publishes their NodeInventory as the plugin would)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from sched_harness import Adapter, start_scheduler, stop_scheduler

from alnair_common import Bus
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_kube_bridge import KubeBridgeService, KubeBridgeSettings

GPU_ASSIGNMENT = "ai.centaurus.io/gpu-assignment"
GROUP, VERSION, PLURAL = "alnair.centaurus.io", "v1alpha1", "podgroups"


def gpu_pod(name: str, memory_gib: int, compute: int, *, profile: str | None = None,
            group: str | None = None) -> dict[str, Any]:
    limits = {"alnair/vgpu-memory": str(memory_gib), "alnair/vgpu-compute": str(compute)}
    meta: dict[str, Any] = {"name": name, "labels": {}, "annotations": {}}
    if profile:
        meta["annotations"]["ai.centaurus.io/scheduling-profile"] = profile
    if group:
        meta["labels"]["alnair.centaurus.io/pod-group"] = group
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "alnair-scheduler",
                     "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists",
                                      "effect": "NoSchedule"}],
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": limits, "requests": limits}}]}}


@dataclass
class Plane:
    kube: KubeNamespace
    bus: Bus
    adapter: Adapter
    bridge: tuple[KubeBridgeService, asyncio.Task]
    scheduler: tuple[Any, asyncio.Task]

    @property
    def core(self) -> k8s.CoreV1Api:
        return self.kube.core

    async def gpu_nodes(self, kwok_nodes: Any, count: int, gpus: int, memory_gib: int) -> list[str]:
        names = await asyncio.to_thread(kwok_nodes, count, gpus, memory_gib)
        for name in names:
            await self.adapter.inventory(name, gpus, memory_gib)
        return names

    async def create(self, *pods: dict[str, Any]) -> None:
        ns = self.kube.namespace

        def create_all() -> None:
            for pod in pods:
                self.core.create_namespaced_pod(ns, pod)

        await asyncio.to_thread(create_all)

    async def podgroup(self, name: str, min_member: int, timeout_s: int = 300) -> None:
        custom = k8s.CustomObjectsApi(self.kube.api_client)
        await asyncio.to_thread(
            custom.create_namespaced_custom_object, GROUP, VERSION, self.kube.namespace, PLURAL,
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name},
             "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout_s}})

    async def podgroup_status(self, name: str) -> dict[str, Any]:
        custom = k8s.CustomObjectsApi(self.kube.api_client)
        obj = await asyncio.to_thread(custom.get_namespaced_custom_object, GROUP, VERSION,
                                      self.kube.namespace, PLURAL, name)
        return obj.get("status") or {}

    async def pods(self) -> dict[str, k8s.V1Pod]:
        listed = await asyncio.to_thread(self.core.list_namespaced_pod, self.kube.namespace)
        return {p.metadata.name: p for p in listed.items}

    async def bound(self, names: list[str], timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """Wait until every pod is bound; its GPU assignment annotation by pod name."""

        async def probe() -> dict[str, dict[str, Any]] | None:
            pods = await self.pods()
            if not all(n in pods and pods[n].spec.node_name for n in names):
                return None
            out = {}
            for n in names:
                a = json.loads(pods[n].metadata.annotations[GPU_ASSIGNMENT])
                assert a["node"] == pods[n].spec.node_name, (n, a, pods[n].spec.node_name)
                out[n] = a
            return out

        return await wait_for(probe, timeout=timeout, interval=0.2, what=f"{len(names)} pods bound")

    async def kube_finish(self, pod: str, kwok_nodes: Any) -> None:
        """Let kwok run the pod to Succeeded (it must be Running first)."""
        ns = self.kube.namespace
        await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, pod, "Running")
        await asyncio.to_thread(kwok_nodes.finish, ns, pod)
        await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, pod, "Succeeded")

    async def events_for(self, pod: str) -> list[k8s.CoreV1Event]:
        listed = await asyncio.to_thread(self.core.list_namespaced_event, self.kube.namespace)
        return [e for e in listed.items if e.involved_object.name == pod]

    async def failed_scheduling(self, pod: str, contains: str, timeout: float = 30.0) -> str:
        async def probe() -> str | None:
            for e in await self.events_for(pod):
                if e.reason == "FailedScheduling" and contains in (e.message or ""):
                    return e.message
            return None

        return await wait_for(probe, timeout=timeout, interval=0.2,
                              what=f"FailedScheduling event on {pod} containing {contains!r}")


def within_capacity(assignments: dict[str, dict[str, Any]], memory_gib: int) -> dict[str, list[int]]:
    per_card: dict[str, list[int]] = {}
    for a in assignments.values():
        m, c = per_card.setdefault(a["gpuUuid"], [0, 0])
        per_card[a["gpuUuid"]] = [m + int(a["memoryGib"]), c + int(a["computePercent"])]
    for card, (m, c) in per_card.items():
        assert m <= memory_gib and c <= 100, f"{card}: {m} GiB / {c} % assigned"
    return per_card


@contextlib.asynccontextmanager
async def plane(nats_server: NatsServer, bus: Bus, kube: KubeNamespace, tmp_path: Path,
                **scheduler_settings: Any):
    from sched_harness import Observer

    await Observer.attach(bus)  # provisions the streams
    settings = KubeBridgeSettings(
        nats_url=nats_server.url, kubeconfig=kube.kubeconfig, watch_namespace=kube.namespace,
        watch_timeout_seconds=5, node_name="test", data_dir=tmp_path)
    bridge = KubeBridgeService(settings)
    bridge_task = asyncio.create_task(bridge.run())

    async def ready() -> bool:
        if bridge_task.done():
            bridge_task.result()
        report = await bridge.health.report() if bridge.ready.is_set() else None
        return bool(report and report.ready)

    await wait_for(ready, timeout=30, what="kube-bridge ready")
    scheduler = await start_scheduler(nats_server.url, **scheduler_settings)
    try:
        yield Plane(kube, bus, Adapter(bus), (bridge, bridge_task), scheduler)
    finally:
        await stop_scheduler(*scheduler)
        bridge.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(bridge_task, 30)
