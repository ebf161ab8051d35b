"""Registration, ListAndWatch and health, and re-registration after a kubelet restart."""

from __future__ import annotations

import asyncio
import time

from dp_harness import NODE, PluginEnv

from alnair.v1 import inventory_pb2
from alnair_common import TypedKV, subjects
from alnair_common.testing import wait_for
from alnair_device_plugin import Resource
from alnair_gpu import HealthEvent, RecordedInventory
from alnair_kubelet.api import deviceplugin as dp

UUID = "GPU-f2b4712f-9931-af4b-7a24-58183960c4b7"


async def test_both_resources_register_and_list_the_h200_units(h200_env: PluginEnv) -> None:
    names = set()
    for resource, units in ((Resource.MEMORY, 140), (Resource.COMPUTE, 100)):
        registration = await h200_env.kubelet.wait_registered(resource.resource_name)
        assert registration.version == "v1beta1" and registration.endpoint == resource.socket_name
        assert registration.options.get_preferred_allocation_available
        plugin = h200_env.kubelet.plugin(registration)
        options = await plugin.GetDevicePluginOptions(dp.Empty(), timeout=5)
        assert options.get_preferred_allocation_available and not options.pre_start_required
        stream = plugin.ListAndWatch(dp.Empty(), timeout=10)
        first = await stream.read()
        stream.cancel()
        # 150754820096 bytes = 140.4 GiB on the recorded H200 → 140 whole GiB units; 100 compute units.
        assert len(first.devices) == units
        assert {d.health for d in first.devices} == {"Healthy"}
        assert all(d.ID.startswith(UUID + "-") and len(d.ID) <= 63 for d in first.devices)
        names.add(registration.resource_name)
    assert names == {"alnair/vgpu-memory", "alnair/vgpu-compute"}


async def test_inventory_is_published_to_bus_and_kv(h200_env: PluginEnv) -> None:
    kv = await TypedKV.open(h200_env.bus, "node_inventory", inventory_pb2.NodeInventory)
    stored = await kv.get(NODE)
    assert stored is not None
    gpu = stored.value.gpus[0]
    assert (gpu.uuid, gpu.model, gpu.memory_bytes, gpu.sm_count, gpu.vgpu_memory_gib) == (
        UUID, "NVIDIA H200", 150754820096, 132, 140)
    assert gpu.health == inventory_pb2.GPU_HEALTH_HEALTHY and not stored.value.simulated
    assert stored.value.driver_version == "580.159.04" and stored.value.cuda_version == "13.0"
    info = await h200_env.bus.js.stream_info("INVENTORY")
    assert info.state.messages >= 1
    last = await h200_env.bus.js.get_last_msg("INVENTORY", subjects.node_inventory(NODE))
    assert inventory_pb2.NodeInventory.FromString(last.data).gpus[0].uuid == UUID


async def test_xid_turns_units_unhealthy_and_recovery_healthy(h200_env: PluginEnv, h200: RecordedInventory) -> None:
    plugin = await h200_env.plugin(Resource.MEMORY)
    stream = plugin.ListAndWatch(dp.Empty(), timeout=20)
    assert {d.health for d in (await stream.read()).devices} == {"Healthy"}

    h200.inject(HealthEvent(uuid=UUID, healthy=False, reason="XID 79: GPU has fallen off the bus", xid=79))
    update = await asyncio.wait_for(stream.read(), 5)
    assert len(update.devices) == 140 and {d.health for d in update.devices} == {"Unhealthy"}
    kv = await TypedKV.open(h200_env.bus, "node_inventory", inventory_pb2.NodeInventory)

    async def unhealthy_in_kv() -> bool:
        stored = await kv.get(NODE)
        return stored is not None and stored.value.gpus[0].health == inventory_pb2.GPU_HEALTH_UNHEALTHY

    await wait_for(unhealthy_in_kv, timeout=5, what="unhealthy GPU in node_inventory")
    stored = await kv.get(NODE)
    assert stored is not None and stored.value.gpus[0].health_reason == "XID 79: GPU has fallen off the bus"

    h200.inject(HealthEvent(uuid=UUID, healthy=True, reason="answering again"))
    update = await asyncio.wait_for(stream.read(), 5)
    assert {d.health for d in update.devices} == {"Healthy"}
    stream.cancel()


async def test_kubelet_restart_is_followed_by_registration_within_5s(h200_env: PluginEnv) -> None:
    await h200_env.plugin(Resource.MEMORY)
    await h200_env.plugin(Resource.COMPUTE)
    started = time.monotonic()
    before = await h200_env.kubelet.restart()
    for resource in Resource:
        plugin = await h200_env.plugin(resource, after=before)
        elapsed = time.monotonic() - started
        assert elapsed < 5.0, f"{resource.resource_name} re-registered after {elapsed:.2f} s"
        # The new socket serves: the restarted kubelet gets the device list.
        stream = plugin.ListAndWatch(dp.Empty(), timeout=5)
        assert len((await stream.read()).devices) in (100, 140)
        stream.cancel()
    assert h200_env.service is not None and h200_env.service.link is not None
    assert h200_env.service.link.registrations == 4
