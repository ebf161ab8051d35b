"""kube-bridge with the real scheduler (a subprocess) on the test plane: a pod that names
alnair-scheduler is placed on a kwok node's card and runs, with a Scheduled Event that says why;
an impossible one gets a FailedScheduling Event recorded through the bridge."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from kb_support import alnair_pod

from alnair.v1 import inventory_pb2
from alnair_common import Bus, ensure_streams, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes


async def test_scheduler_and_bridge_place_a_pod(
        bus: Bus, nats_server: NatsServer, kube: KubeNamespace, kwok_nodes: KwokNodes,
        start_bridge, tmp_path: Path) -> None:
    [node] = kwok_nodes(1, gpus_per_node=1, gpu_memory_gib=80)
    inventory = inventory_pb2.NodeInventory(node=node)  # what the device plugin publishes
    inventory.gpus.add(uuid="GPU-kwok-0", index=0, model="NVIDIA H200", memory_bytes=80 << 30,
                       health=inventory_pb2.GPU_HEALTH_HEALTHY, vgpu_memory_gib=80,
                       vgpu_compute_percent=100)
    inventory.observed_at.GetCurrentTime()
    await ensure_streams(bus)
    await bus.publish(subjects.node_inventory(node), inventory)
    await start_bridge()
    scheduler = subprocess.Popen(  # noqa: ASYNC220 - spawning does not block
        [sys.executable, "-m", "alnair_scheduler"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "ALNAIR_NATS_URL": nats_server.url, "ALNAIR_HEALTH_PORT": "0",
             "ALNAIR_DATA_DIR": str(tmp_path), "ALNAIR_TICK_SECONDS": "0.2"})
    try:
        kube.core.create_namespaced_pod(kube.namespace, alnair_pod("placed", memory_gib=40))
        running = await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, "placed",
                                          "Running", timeout=60)
        assert running.spec.node_name == node
        assignment = json.loads(running.metadata.annotations["ai.centaurus.io/gpu-assignment"])
        assert assignment["gpuUuid"] == "GPU-kwok-0" and assignment["memoryGib"] == 40

        async def scheduled():  # the scheduler's why, where `kubectl describe pod` shows it
            events = kube.core.list_namespaced_event(kube.namespace).items
            return [e for e in events if e.involved_object.name == "placed" and e.reason == "Scheduled"]
        [event] = await wait_for(scheduled, timeout=30, what="Scheduled event")
        assert event.type == "Normal" and event.involved_object.uid == running.metadata.uid
        assert f"to {node} (GPU GPU-kwok-0, 40 GiB" in event.message
        reason = event.message.split(": ", 1)[1]  # the BindDecision's reason, after the placement
        assert reason.strip(), event.message

        kube.core.create_namespaced_pod(kube.namespace, alnair_pod("too-big", memory_gib=100))

        async def failed_scheduling():
            events = kube.core.list_namespaced_event(kube.namespace).items
            return [e for e in events if e.involved_object.name == "too-big"
                    and e.reason == "FailedScheduling"]

        [event] = await wait_for(failed_scheduling, timeout=30, what="FailedScheduling event")
        assert "80 GiB" in event.message
        assert not kube.core.read_namespaced_pod("too-big", kube.namespace).spec.node_name
    finally:
        scheduler.terminate()
        scheduler.wait(20)
