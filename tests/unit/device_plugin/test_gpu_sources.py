"""alnair_gpu: recorded, simulated and NVML sources, health, and the NodeInventory edge."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from alnair.v1 import inventory_pb2
from alnair_gpu import (
    GpuError,
    GpuUnavailableError,
    HealthEvent,
    InventoryFormatError,
    InventorySource,
    NvmlInventory,
    RecordedInventory,
    SimulatedInventory,
    from_proto,
    to_proto,
)

H200 = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200" / "inventory.json"
RECORDED = json.loads(H200.read_text())


def test_recorded_h200_is_real_data_not_simulated() -> None:
    source = RecordedInventory.load(H200)
    assert isinstance(source, InventorySource)
    gpus = source.inventory()
    assert not gpus.simulated and gpus.driver_version == "580.159.04" and gpus.cuda_version == "13.0"
    (gpu,) = gpus.gpus
    assert (gpu.uuid, gpu.model, gpu.memory_bytes, gpu.sm_count, gpu.memory_gib) == (
        "GPU-f2b4712f-9931-af4b-7a24-58183960c4b7", "NVIDIA H200", 150754820096, 132, 140)


@pytest.mark.parametrize(("data", "match"), [
    ([], "expected an object with a 'gpus' list"),
    ({"gpus": [{"index": 0, "uuid": "GPU-x"}]}, "gpus\\[0\\] lacks name, memory_total_bytes, sm_count"),
    ({"gpus": [{"index": 0, "uuid": "GPU-x", "name": "n", "memory_total_bytes": -5, "sm_count": 1}]},
     "memory_total_bytes=-5"),
])
def test_bad_recordings_say_what_is_wrong(tmp_path: Path, data: object, match: str) -> None:
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InventoryFormatError, match=match):
        RecordedInventory.load(path)


def test_unreadable_recording(tmp_path: Path) -> None:
    with pytest.raises(InventoryFormatError, match="cannot read a recorded inventory"):
        RecordedInventory.load(tmp_path / "absent.json")


def test_simulated_gpus_are_labelled() -> None:
    gpus = SimulatedInventory.parse("sim:2x80").inventory()
    assert gpus.simulated and len(gpus.gpus) == 2
    assert all(g.memory_gib == 80 and "Simulated" in g.model and "sim" in g.uuid for g in gpus.gpus)
    assert to_proto(gpus, "laptop").simulated


@pytest.mark.parametrize("spec", ["sim:2", "2x80", "sim:0x80", "sim:2x0", "sim:100x80", "sim:-1x80", "nvml"])
def test_bad_simulated_specs(spec: str) -> None:
    with pytest.raises(InventoryFormatError, match="sim:"):
        SimulatedInventory.parse(spec)


def test_injected_health_changes_inventory_and_wakes_waiters() -> None:
    source = SimulatedInventory.parse("sim:2x40")
    assert source.wait_health_event(0.01) is None
    uuid = source.inventory().gpus[1].uuid
    source.inject(HealthEvent(uuid=uuid, healthy=False, reason="XID 48: double-bit ECC", xid=48))
    assert source.wait_health_event(1.0) == HealthEvent(uuid, False, "XID 48: double-bit ECC", 48)
    assert [g.healthy for g in source.inventory().gpus] == [True, False]
    with pytest.raises(GpuError, match="no GPU 'GPU-other'"):
        source.inject(HealthEvent(uuid="GPU-other", healthy=False))


def test_proto_round_trip_and_validation() -> None:
    gpus = RecordedInventory.load(H200).inventory()
    gpus = gpus.apply(HealthEvent(gpus.gpus[0].uuid, healthy=False, reason="XID 79"))
    message = to_proto(gpus, "gpu-node-1")
    assert message.gpus[0].health == inventory_pb2.GPU_HEALTH_UNHEALTHY
    assert message.gpus[0].vgpu_compute_percent == 100
    assert from_proto(message) == gpus
    message.gpus.add().CopyFrom(message.gpus[0])
    with pytest.raises(InventoryFormatError, match="must be unique"):
        from_proto(message)
    del message.gpus[1]
    message.gpus[0].uuid = ""
    with pytest.raises(InventoryFormatError, match="uuid='' and memory_bytes=150754820096"):
        from_proto(message)


def test_nvml_without_a_driver_says_so() -> None:
    with pytest.raises(GpuUnavailableError, match="sim:2x80"):
        NvmlInventory()


class RecordedNvml(SimpleNamespace):
    """NVML answering with the H200 recording: the GPU boundary, the one place a stand-in is allowed."""

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self) -> None:
        super().__init__()
        self.events: list[int] = []
        self.lost = False
        self.gpu = RECORDED["gpus"][0]

    def nvmlInit(self) -> None: ...  # noqa: N802
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: return 1  # noqa: N802, E704
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i  # noqa: N802, E704
    def nvmlDeviceGetUUID(self, h: int) -> str: return self.gpu["uuid"]  # noqa: N802, E704
    def nvmlDeviceGetName(self, h: int) -> str: return self.gpu["name"]  # noqa: N802, E704
    def nvmlSystemGetDriverVersion(self) -> str: return RECORDED["driver_version"]  # noqa: N802, E704
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int: return RECORDED["cuda_driver_version"]  # noqa: N802, E704
    # H200: 132 SMs of 128 CUDA cores (compute capability 9.0).
    def nvmlDeviceGetNumGpuCores(self, h: int) -> int: return 16896  # noqa: N802, E704
    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]: return (9, 0)  # noqa: N802, E704
    def nvmlEventSetCreate(self) -> str: return "events"  # noqa: N802, E704
    def nvmlDeviceRegisterEvents(self, h: int, kind: int, es: str) -> None: ...  # noqa: N802
    def nvmlEventSetFree(self, es: str) -> None: ...  # noqa: N802

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        if self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(total=self.gpu["memory_total_bytes"])

    def nvmlEventSetWait_v2(self, es: str, timeout_ms: int) -> SimpleNamespace:  # noqa: N802
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return SimpleNamespace(eventData=self.events.pop(0), device=0, eventType=self.nvmlEventTypeXidCriticalError)


def test_nvml_source_reads_inventory_and_turns_xids_and_loss_into_health() -> None:
    nv = RecordedNvml()
    now = [1000.0]
    source = NvmlInventory(nvml=nv, xid_quiet_seconds=60.0, clock=lambda: now[0])  # type: ignore[arg-type]
    (gpu,) = source.inventory().gpus
    assert (gpu.uuid, gpu.memory_bytes, gpu.sm_count, gpu.healthy) == (nv.gpu["uuid"], 150754820096, 132, True)
    assert source.inventory().cuda_version == "13.0"
    assert source.wait_health_event(0.01) is None

    nv.events = [13]  # an application's illegal address: not the card's fault
    assert source.wait_health_event(0.01) is None
    nv.events = [79]
    event = source.wait_health_event(0.01)
    assert event is not None and not event.healthy and event.xid == 79
    assert not source.inventory().gpus[0].healthy and "XID 79" in source.inventory().gpus[0].health_reason
    assert source.wait_health_event(0.01) is None  # still within the quiet period
    now[0] += 61.0
    recovered = source.wait_health_event(0.01)
    assert recovered is not None and recovered.healthy and source.inventory().gpus[0].healthy

    nv.lost = True
    lost = source.wait_health_event(0.01)
    assert lost is not None and not lost.healthy and "device lost" in lost.reason
    assert source.wait_health_event(0.01) is None  # reported once
    nv.lost = False
    back = source.wait_health_event(0.01)
    assert back is not None and back.healthy
    source.close()
