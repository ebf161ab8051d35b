#!/usr/bin/env python3
"""Run the device plugin against real NVML once and record what it saw (issue #5).

On a GPU machine (no kubelet needed):

    uv sync --all-packages
    .venv/bin/python scripts/gpu/capture_device_plugin.py --out tests/data/gpu/<gpu>/device_plugin.json

It records (1) NvmlInventory's view — UUID, model, memory, SM count and how the SM count was
obtained (libcuda cuDeviceGetAttribute, else NVML cores / cores-per-SM) — next to what
nvidia-smi says; (2) the health events NVML delivers during ``--watch`` seconds; (3) an
end-to-end run of the real plugin service with NVML, an embedded nats-server and the test
kubelet (``alnair_kubelet.testing``) on unix sockets in a temp dir: registration of both
resources, the first ListAndWatch list, a bind decision for GPU 0 published on the bus,
GetPreferredAllocation and Allocate for it, and the NodeInventory stored in KV.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from google.protobuf.json_format import MessageToDict

from alnair.v1 import common_pb2, inventory_pb2, scheduling_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.natsd import NatsServer, free_port
from alnair_common.testing import wait_for
from alnair_device_plugin import DevicePluginService, DevicePluginSettings, Resource
from alnair_gpu import NvmlInventory, to_proto
from alnair_gpu._nvml_inventory import _cuda_sm_counts
from alnair_kubelet.api import deviceplugin as dp
from alnair_kubelet.testing import KubeletHarness

NODE = "capture-node"


def nvml_view(watch: float) -> dict:
    source = NvmlInventory()
    gpus = source.inventory()
    via_cuda = _cuda_sm_counts()
    events = []
    deadline = time.monotonic() + watch
    while time.monotonic() < deadline:
        event = source.wait_health_event(min(1.0, max(0.0, deadline - time.monotonic())))
        if event is not None:
            events.append(event.__dict__)
    source.close()
    smi = None
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout
    return {
        "inventory": MessageToDict(to_proto(gpus, NODE)),
        "sm_count_source": {g.uuid: ("libcuda" if g.uuid in via_cuda else "nvml-cores/arch") for g in gpus.gpus},
        "health_events_during_watch": events,
        "watch_seconds": watch,
        "nvidia_smi": smi,
    }


async def plugin_run(tmp: Path, gpus: str) -> dict:
    nats = NatsServer(store_dir=tmp / "js", port=free_port())
    nats.start()
    kubelet = KubeletHarness(tmp / "device-plugins")
    await kubelet.start()
    settings = DevicePluginSettings(nats_url=nats.url, node_name=NODE, device_plugin_dir=kubelet.directory,
                                    state_dir=tmp / "state", workspace_root=tmp / "ws", gpus=gpus,
                                    interceptor_host_path=tmp / "libalnair_cuda.so")
    service = DevicePluginService(settings)
    task = asyncio.create_task(service.run())
    bus = await Bus.connect(nats.url, service="capture")
    out: dict = {}
    try:
        await asyncio.wait_for(service.ready.wait(), 30)
        t0 = time.monotonic()
        plugins = {}
        for r in Resource:
            reg = await kubelet.wait_registered(r.resource_name, timeout=10)
            plugins[r] = kubelet.plugin(reg)
        out["registration_seconds"] = round(time.monotonic() - t0, 3)
        for r, stub in plugins.items():
            stream = stub.ListAndWatch(dp.Empty(), timeout=10)
            first = await stream.read()
            stream.cancel()
            out[f"{r.resource_name}_devices"] = len(first.devices)
            out[f"{r.resource_name}_health"] = sorted({d.health for d in first.devices})
        gpu = service.state.gpus.gpus[0]  # type: ignore[union-attr]
        await bus.publish(subjects.sched_bind(), scheduling_pb2.BindDecision(
            workload=common_pb2.WorkloadRef(uid="capture-1", name="capture", namespace="default"),
            assignment=common_pb2.GpuAssignment(node=NODE, gpu_uuid=gpu.uuid, gpu_index=gpu.index,
                                                memory_gib=4, compute_percent=25)))
        await wait_for(lambda: asyncio.sleep(0, service.index.get("capture-1")),  # type: ignore[union-attr]
                       what="bind decision indexed")
        for r, size in ((Resource.MEMORY, 4), (Resource.COMPUTE, 25)):
            available = [d.ID for d in (await plugins[r].ListAndWatch(dp.Empty(), timeout=5).read()).devices]
            pref = await plugins[r].GetPreferredAllocation(dp.PreferredAllocationRequest(container_requests=[
                dp.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=size)]))
            chosen = list(pref.container_responses[0].deviceIDs)
            answer = await plugins[r].Allocate(dp.AllocateRequest(container_requests=[
                dp.ContainerAllocateRequest(devices_ids=chosen)]))
            out[f"{r.resource_name}_allocate"] = MessageToDict(answer)
        kv = await TypedKV.open(bus, "node_inventory", inventory_pb2.NodeInventory)
        stored = await kv.get(NODE)
        out["kv_inventory"] = MessageToDict(stored.value) if stored else None
    finally:
        await bus.drain()
        service.request_stop()
        await asyncio.wait_for(task, 30)
        await kubelet.stop()
        nats.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--watch", type=float, default=10.0, help="seconds to wait for NVML health events")
    parser.add_argument("--gpus", default="nvml", help="GPU source; 'sim:1x80' dry-runs the script without a GPU")
    args = parser.parse_args()
    record = {"nvml": nvml_view(args.watch) if args.gpus == "nvml" else None, "gpus": args.gpus}
    with tempfile.TemporaryDirectory() as tmp:
        record["plugin"] = asyncio.run(plugin_run(Path(tmp), args.gpus))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record["plugin"].items() if not k.endswith("_allocate")}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
