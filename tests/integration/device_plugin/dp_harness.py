"""A running device plugin between a test kubelet (real gRPC on unix sockets) and a real NATS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from alnair.v1 import common_pb2, scheduling_pb2, workload_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import commit_share
from alnair_device_plugin import DevicePluginService, DevicePluginSettings, Resource, unit_id
from alnair_gpu import InjectedHealth
from alnair_kubelet.api import deviceplugin as dp
from alnair_kubelet.api import deviceplugin_grpc as dp_grpc
from alnair_kubelet.testing import KubeletHarness

ROOT = Path(__file__).resolve().parents[3]
H200 = ROOT / "tests" / "data" / "gpu" / "h200" / "inventory.json"
NODE = "gpu-node-1"


@dataclass
class PluginEnv:
    tmp: Path
    nats: NatsServer
    bus: Bus
    kubelet: KubeletHarness
    source: InjectedHealth
    service: DevicePluginService | None = None
    task: asyncio.Task[None] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # more settings (e.g. MPS mode)

    def settings(self) -> DevicePluginSettings:
        return DevicePluginSettings(
            nats_url=self.nats.url, node_name=NODE, device_plugin_dir=self.kubelet.directory,
            state_dir=self.tmp / "workspaces" / ".device-plugin", workspace_root=self.tmp / "workspaces",
            interceptor_host_path=self.tmp / "lib" / "libalnair_cuda.so", kubelet_poll_seconds=0.1,
            pod_resources_socket=self.tmp / "pod-resources" / "kubelet.sock", reconcile_seconds=0.1,
            stale_grace_seconds=0.5, assignment_wait_seconds=0.3, **self.overrides,
        )

    async def start(self) -> DevicePluginService:
        self.service = DevicePluginService(self.settings(), source=self.source)
        self.task = asyncio.create_task(self.service.run())
        await asyncio.wait_for(self.service.ready.wait(), 15)
        return self.service

    async def stop(self) -> None:
        if self.service is not None and self.task is not None:
            self.service.request_stop()
            await asyncio.wait_for(self.task, 15)
            self.service = self.task = None

    async def plugin(self, resource: Resource, after: int = 0) -> dp_grpc.DevicePluginStub:
        registration = await self.kubelet.wait_registered(resource.resource_name, after=after, timeout=5.0)
        return self.kubelet.plugin(registration)

    async def bind(self, uid: str, gpu_uuid: str, gpu_index: int, memory_gib: int, compute_percent: int,
                   *, node: str = NODE, wait: bool = True, commit: bool = True) -> None:
        """Publish a decision as the scheduler does: its share committed first (``commit``),
        on a card as big as this node's (80 GiB for a card it does not have)."""
        decision = scheduling_pb2.BindDecision(
            workload=common_pb2.WorkloadRef(uid=uid, name=f"pod-{uid}", namespace="ml",
                                            mode=common_pb2.MODE_KUBERNETES),
            assignment=common_pb2.GpuAssignment(node=node, gpu_uuid=gpu_uuid, gpu_index=gpu_index,
                                                memory_gib=memory_gib, compute_percent=compute_percent),
            scheduler="alnair-scheduler")
        if commit:
            card = self.source.inventory().by_uuid(gpu_uuid)
            await commit_share(self.bus, decision, capacity_memory_gib=card.memory_gib if card else 80)
        await self.bus.publish(subjects.sched_bind(), decision)
        if wait:
            await wait_for(lambda: asyncio.sleep(0, self.service and self.service.index
                                                 and self.service.index.get(uid)),
                           what=f"assignment {uid} indexed")

    async def workload_phase(self, uid: str, phase: int) -> None:
        event = workload_pb2.WorkloadEvent(workload=workload_pb2.Workload(
            ref=common_pb2.WorkloadRef(uid=uid, name=f"pod-{uid}", namespace="ml"), phase=phase, node=NODE))
        await self.bus.publish(subjects.workload_events(), event)


async def make_env(tmp_path: Path, nats_server: NatsServer, bus: Bus, source: InjectedHealth,
                   **overrides: Any) -> AsyncIterator[PluginEnv]:
    kubelet = KubeletHarness(tmp_path / "device-plugins")
    await kubelet.start()
    env = PluginEnv(tmp_path, nats_server, bus, kubelet, source, overrides=overrides)
    await env.start()
    try:
        yield env
    finally:
        await env.stop()
        await kubelet.stop()


# -- kubelet-side calls shared by the tests (two simulated 80 GiB cards) ---------------------

CARD0, CARD1 = "GPU-sim-0000-80g", "GPU-sim-0001-80g"


def ids(resource: Resource, uuid: str, units: range) -> list[str]:
    return [unit_id(resource, uuid, k) for k in units]


def everything(resource: Resource) -> list[str]:
    n = 80 if resource is Resource.MEMORY else 100
    return ids(resource, CARD0, range(n)) + ids(resource, CARD1, range(n))


async def preferred(plugin, resource: Resource, size: int) -> list[str]:
    answer = await plugin.GetPreferredAllocation(dp.PreferredAllocationRequest(container_requests=[
        dp.ContainerPreferredAllocationRequest(available_deviceIDs=everything(resource), allocation_size=size)
    ]), timeout=5)
    return list(answer.container_responses[0].deviceIDs)


async def allocate(plugin, *requests: list[str]) -> dp.AllocateResponse:
    return await plugin.Allocate(dp.AllocateRequest(container_requests=[
        dp.ContainerAllocateRequest(devices_ids=r) for r in requests]), timeout=5)


async def expect_refusal(call, code: grpc.StatusCode, match: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    assert match in caught.value.details(), caught.value.details()
    return caught.value.details()
