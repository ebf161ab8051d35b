"""The committed kubelet gRPC code matches its .proto files; the copies stay wire-compatible."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

from alnair_kubelet.api import deviceplugin, podresources

ROOT = Path(__file__).resolve().parents[3]
API = ROOT / "libs" / "kubelet" / "src" / "alnair_kubelet" / "_api"
BIN = Path(sys.executable).parent


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run([str(ROOT / "libs" / "kubelet" / "gen-proto"), str(tmp_path)], check=True,
                   env={"PATH": f"{BIN}:/usr/bin:/bin"}, capture_output=True)
    fresh = sorted(p.name for p in (tmp_path / "alnair_kubelet" / "_api").iterdir())
    assert len(fresh) == 3 * len(list(API.glob("*.proto"))), fresh  # _pb2, .pyi, _grpc each
    stale = [n for n in fresh if not filecmp.cmp(tmp_path / "alnair_kubelet" / "_api" / n, API / n, shallow=False)]
    assert stale == [], f"generated code is stale, run libs/kubelet/gen-proto: {stale}"


def _fields(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


def test_wire_names_and_field_numbers_match_the_kubelet() -> None:
    # The kubelet routes by "/<package>.<Service>/<Method>" and decodes by field number.
    assert deviceplugin.DESCRIPTOR.package == "v1beta1"
    assert podresources.DESCRIPTOR.package == "v1"
    services = {s.full_name: [m.name for m in s.methods] for s in deviceplugin.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": ["GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate",
                                 "PreStartContainer"],
    }
    assert _fields(deviceplugin.RegisterRequest) == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert _fields(deviceplugin.Device) == {"ID": 1, "health": 2, "topology": 3}
    assert _fields(deviceplugin.ContainerPreferredAllocationRequest) == {
        "available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert _fields(deviceplugin.ContainerAllocateResponse) == {
        "envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    assert _fields(deviceplugin.Mount) == {"container_path": 1, "host_path": 2, "read_only": 3}
    lister = podresources.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [m.name for m in lister.methods] == ["List", "GetAllocatableResources", "Get"]
    assert _fields(podresources.ContainerResources) == {
        "name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5}
    assert _fields(podresources.ContainerDevices) == {"resource_name": 1, "device_ids": 2, "topology": 3}
