"""alnair_gpu: the GPUs of a node — inventory, health and (exporter) samples, and MPS mode's
control daemons (:class:`MpsDaemons`, both node adapters).

Sources: :class:`NvmlInventory` (real GPUs), :class:`RecordedInventory` (a recording of a real
GPU, for CI), :class:`SimulatedInventory` (``sim:2x80``, clearly labelled). Errors derive from
:class:`GpuError`. Measurements: :class:`GpuSampler` (:class:`NvmlSampler`,
:class:`ReplaySampler` over real NVML recordings). Keep this file a plain re-export list, one import per module.
"""

from ._errors import GpuError, GpuUnavailableError, InventoryFormatError
from ._injected_health import InjectedHealth
from ._inventory import GIB, GpuInfo, HealthEvent, InventorySource, NodeGpus
from ._mps import MpsCard, MpsDaemons, MpsFault, mps_faults
from ._nvml_inventory import NvmlInventory
from ._nvml_samples import NvmlSampler
from ._proto import from_proto, to_proto
from ._recorded import RecordedInventory, parse_recording
from ._replay import RecordedWorkload, Recording, ReplaySampler, load_recording
from ._samples import DeviceSample, GpuSampler, GpuSnapshot, ProcessSample, SampleSourceError
from ._simulated import SimulatedInventory

__all__ = [
    "DeviceSample",
    "GIB",
    "GpuError",
    "GpuInfo",
    "GpuSampler",
    "GpuSnapshot",
    "GpuUnavailableError",
    "HealthEvent",
    "InjectedHealth",
    "InventoryFormatError",
    "InventorySource",
    "MpsCard",
    "MpsDaemons",
    "MpsFault",
    "NodeGpus",
    "NvmlInventory",
    "NvmlSampler",
    "ProcessSample",
    "RecordedInventory",
    "RecordedWorkload",
    "Recording",
    "ReplaySampler",
    "SampleSourceError",
    "SimulatedInventory",
    "from_proto",
    "load_recording",
    "mps_faults",
    "parse_recording",
    "to_proto",
]
