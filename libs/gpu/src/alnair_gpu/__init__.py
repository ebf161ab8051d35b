"""alnair_gpu: the GPUs of a node — inventory, health and (exporter) samples.

Sources: :class:`NvmlInventory` (real GPUs), :class:`RecordedInventory` (a recording of a real
GPU, for CI), :class:`SimulatedInventory` (``sim:2x80``, clearly labelled). Errors derive from
:class:`GpuError`. Keep this file a plain re-export list, one import per module.
"""

from ._errors import GpuError, GpuUnavailableError, InventoryFormatError
from ._injected_health import InjectedHealth
from ._inventory import GIB, GpuInfo, HealthEvent, InventorySource, NodeGpus
from ._nvml_inventory import NvmlInventory
from ._proto import from_proto, to_proto
from ._recorded import RecordedInventory, parse_recording
from ._simulated import SimulatedInventory

__all__ = [
    "GIB",
    "GpuError",
    "GpuInfo",
    "GpuUnavailableError",
    "HealthEvent",
    "InjectedHealth",
    "InventoryFormatError",
    "InventorySource",
    "NodeGpus",
    "NvmlInventory",
    "RecordedInventory",
    "SimulatedInventory",
    "from_proto",
    "parse_recording",
    "to_proto",
]
