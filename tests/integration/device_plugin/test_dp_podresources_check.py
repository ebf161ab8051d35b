"""Allocations checked against the kubelet's PodResources: identity mismatches and stale workspaces."""

from __future__ import annotations

import asyncio

from dp_harness import CARD0, CARD1, PluginEnv, allocate, ids

from alnair.v1 import platform_pb2
from alnair_common import subjects
from alnair_common.testing import wait_for
from alnair_device_plugin import Resource
from alnair_kubelet.api import podresources as pr
from alnair_kubelet.testing import PodResourcesHarness


def pod(name: str, device_ids: list[str]) -> pr.PodResources:
    return pr.PodResources(name=name, namespace="ml", containers=[pr.ContainerResources(name="main", devices=[
        pr.ContainerDevices(resource_name="alnair/vgpu-memory", device_ids=device_ids)])])


async def test_mismatch_is_reported_and_vanished_allocations_are_cleaned(two_gpu_env: PluginEnv) -> None:
    env = two_gpu_env
    errors: list[platform_pb2.ErrorEvent] = []

    async def collect(_: str, event: platform_pb2.ErrorEvent) -> None:
        errors.append(event)

    await env.bus.subscribe(subjects.error("device-plugin"), platform_pb2.ErrorEvent, collect)
    kubelet_record = PodResourcesHarness(env.tmp / "pod-resources" / "kubelet.sock")
    r1, r2 = ids(Resource.MEMORY, CARD0, range(4)), ids(Resource.MEMORY, CARD1, range(6))
    kubelet_record.pods = [pod("pod-k1", r1), pod("somebody-else", r2)]
    await kubelet_record.start()
    try:
        memory = await env.plugin(Resource.MEMORY)
        await env.bind("k1", CARD0, 0, memory_gib=4, compute_percent=0)
        await env.bind("k2", CARD1, 1, memory_gib=6, compute_percent=0)
        await allocate(memory, r1)
        await allocate(memory, r2)
        await wait_for(lambda: asyncio.sleep(0, errors), what="identity-mismatch error event")
        assert errors[0].code == "identity-mismatch" and "held by ml/somebody-else" in errors[0].message
        assert len(errors) == 1

        # The kubelet stops listing k1's devices (the pod is gone, its end event never came).
        kubelet_record.pods = [pod("somebody-else", r2)]
        workspace = env.tmp / "workspaces" / "k1"
        await wait_for(lambda: asyncio.sleep(0, not workspace.exists()), timeout=5, what="k1's workspace removed")
        assert env.service is not None and env.service.index is not None
        assert env.service.index.get("k1") is None and env.service.index.get("k2") is not None
        assert (env.tmp / "workspaces" / "k2").is_dir()
    finally:
        await kubelet_record.stop()
