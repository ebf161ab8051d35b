"""PodResources List over a real unix socket, and PID → pod on this machine's real /proc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alnair_kubelet import KubeletUnavailableError, PodResourcesClient, identify_pid, unified_path
from alnair_kubelet.api import podresources as pr
from alnair_kubelet.testing import PodResourcesHarness


async def test_list_maps_devices_to_containers(tmp_path: Path) -> None:
    harness = PodResourcesHarness(tmp_path / "pod-resources" / "kubelet.sock")
    harness.pods = [
        pr.PodResources(name="train-0", namespace="ml", containers=[
            pr.ContainerResources(name="main", devices=[
                pr.ContainerDevices(resource_name="alnair/vgpu-memory", device_ids=["GPU-a-m0", "GPU-a-m1"]),
                pr.ContainerDevices(resource_name="alnair/vgpu-compute", device_ids=["GPU-a-c0"]),
            ]),
            pr.ContainerResources(name="sidecar"),
        ]),
        pr.PodResources(name="web", namespace="default", containers=[pr.ContainerResources(name="nginx")]),
    ]
    await harness.start()
    try:
        async with PodResourcesClient(harness.socket, timeout=2.0) as client:
            snapshot = await client.list()
    finally:
        await harness.stop()
    owner = snapshot.owner_of("GPU-a-m1")
    assert owner is not None and (owner.namespace, owner.pod, owner.container) == ("ml", "train-0", "main")
    assert snapshot.owner_of("GPU-a-m1", resource="alnair/vgpu-compute") is None
    assert snapshot.in_use("alnair/vgpu-memory") == {"GPU-a-m0", "GPU-a-m1"}
    assert [e.resource for e in snapshot.devices_of("ml", "train-0")] == ["alnair/vgpu-memory", "alnair/vgpu-compute"]


async def test_missing_socket_is_temporary_with_a_hint(tmp_path: Path) -> None:
    async with PodResourcesClient(tmp_path / "absent.sock", timeout=0.5) as client:
        with pytest.raises(KubeletUnavailableError, match="is the kubelet running"):
            await client.list()


async def test_dead_socket_is_temporary(tmp_path: Path) -> None:
    harness = PodResourcesHarness(tmp_path / "kubelet.sock")
    await harness.start()
    await harness.stop()  # the socket file may remain; nobody answers
    harness.socket.touch()
    async with PodResourcesClient(harness.socket, timeout=0.5) as client:
        with pytest.raises(KubeletUnavailableError, match="failed within 0.5 s"):
            await client.list()


def test_real_processes_of_this_machine_are_not_pod_containers() -> None:
    """This machine runs no kubelet: every live PID must map to no pod, none may crash it."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    assert os.getpid() in pids
    own = unified_path(Path(f"/proc/{os.getpid()}/cgroup").read_text())
    assert own.startswith("/")
    assert "kubepods" not in own
    assert [pid for pid in pids if identify_pid(pid) is not None] == []
