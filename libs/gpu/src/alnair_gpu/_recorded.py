"""GPUs replayed from an inventory recorded on a real machine (``scripts/gpu/nvml_record.py``).

CI has no GPU; tests read what NVML really said on an NVIDIA H200 (``tests/data/gpu/h200/
inventory.json``) instead of numbers someone made up. Health changes are injected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._errors import InventoryFormatError
from ._injected_health import InjectedHealth
from ._inventory import GpuInfo, NodeGpus

_REQUIRED = ("index", "uuid", "name", "memory_total_bytes", "sm_count")


class RecordedInventory(InjectedHealth):
    """An :class:`InventorySource` over a recorded ``inventory.json``."""

    def __init__(self, node_gpus: NodeGpus, path: Path | None = None) -> None:
        super().__init__(node_gpus)
        self.path = path

    @classmethod
    def load(cls, path: Path | str) -> RecordedInventory:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise InventoryFormatError(f"{path}: cannot read a recorded inventory: {e}") from e
        return cls(parse_recording(data, str(path)), path)


def parse_recording(data: Any, origin: str = "recording") -> NodeGpus:
    """Validate the recorder's JSON and turn it into :class:`NodeGpus` (not simulated: real data)."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise InventoryFormatError(f"{origin}: expected an object with a 'gpus' list, as nvml_record.py writes")
    gpus = []
    for n, raw in enumerate(data["gpus"]):
        missing = [k for k in _REQUIRED if not isinstance(raw, dict) or k not in raw]
        if missing:
            raise InventoryFormatError(f"{origin}: gpus[{n}] lacks {', '.join(missing)}")
        memory, sms = raw["memory_total_bytes"], raw["sm_count"]
        if not isinstance(memory, int) or memory <= 0 or not isinstance(sms, int) or sms < 0:
            raise InventoryFormatError(
                f"{origin}: gpus[{n}] has memory_total_bytes={memory!r} and sm_count={sms!r}; "
                "expected a positive byte count and a non-negative SM count"
            )
        gpus.append(GpuInfo(uuid=str(raw["uuid"]), index=int(raw["index"]), model=str(raw["name"]),
                            memory_bytes=memory, sm_count=sms))
    return NodeGpus(gpus=tuple(gpus), simulated=False, driver_version=str(data.get("driver_version", "")),
                    cuda_version=_cuda_version(data.get("cuda_driver_version")))


def _cuda_version(raw: Any) -> str:
    """NVML reports the CUDA driver version as 1000*major + 10*minor (13000 → "13.0")."""
    if isinstance(raw, int) and raw > 0:
        return f"{raw // 1000}.{(raw % 1000) // 10}"
    return str(raw or "")
