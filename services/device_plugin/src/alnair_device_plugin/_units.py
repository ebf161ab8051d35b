"""Device IDs: one per unit of one physical GPU, so every unit belongs to exactly one card.

``alnair/vgpu-memory`` has ``floor(memory GiB)`` units per GPU, ``alnair/vgpu-compute`` has 100.
An ID is ``<GPU UUID>-m<k>`` or ``<GPU UUID>-c<k>``: the card is readable from any ID the kubelet
sends back, and IDs stay under the kubelet's 63-character limit (a UUID is 40).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum

from alnair_gpu import GpuInfo, NodeGpus

from ._errors import InvalidDevicesError

MAX_ID_LENGTH = 63
COMPUTE_UNITS_PER_GPU = 100


class Resource(Enum):
    """The two extended resources, with the letter their unit IDs carry."""

    MEMORY = ("alnair/vgpu-memory", "m", "GiB")
    COMPUTE = ("alnair/vgpu-compute", "c", "%")

    def __init__(self, resource_name: str, letter: str, unit: str) -> None:
        self.resource_name = resource_name
        self.letter = letter
        self.unit = unit

    @property
    def socket_name(self) -> str:
        return f"alnair-vgpu-{self.name.lower()}.sock"

    def units_of(self, gpu: GpuInfo) -> int:
        return gpu.memory_gib if self is Resource.MEMORY else COMPUTE_UNITS_PER_GPU


@dataclass(frozen=True, order=True)
class Unit:
    uuid: str
    index: int


def unit_id(resource: Resource, uuid: str, index: int) -> str:
    return f"{uuid}-{resource.letter}{index}"


def all_units(resource: Resource, gpus: NodeGpus) -> list[tuple[str, GpuInfo]]:
    """Every device ID of ``resource`` on this node, with its GPU, in card then unit order."""
    return [(unit_id(resource, g.uuid, k), g) for g in gpus.gpus for k in range(resource.units_of(g))]


def parse_units(resource: Resource, ids: list[str], gpus: NodeGpus) -> list[Unit]:
    """Validate device IDs sent by the kubelet; every problem is named in the error."""
    units = []
    for device_id in ids:
        uuid, sep, tail = device_id.rpartition(f"-{resource.letter}")
        gpu = gpus.by_uuid(uuid) if sep else None
        if gpu is None or not tail.isdigit() or not 0 <= int(tail) < resource.units_of(gpu):
            raise InvalidDevicesError(
                f"{resource.resource_name}: unknown device ID {device_id!r}; IDs look like "
                f"<GPU UUID>-{resource.letter}<unit> for the GPUs of this node "
                f"({', '.join(g.uuid for g in gpus.gpus) or 'none'})")
        units.append(Unit(uuid, int(tail)))
    duplicates = [u for u, n in Counter(ids).items() if n > 1]
    if duplicates:
        raise InvalidDevicesError(f"{resource.resource_name}: device IDs repeated: {', '.join(duplicates[:5])}")
    return units
