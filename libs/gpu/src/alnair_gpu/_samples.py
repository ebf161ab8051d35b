"""The one interface behind which NVML sits for measurements: device and per-process samples.

The exporter (and anything else that measures GPUs) asks a :class:`GpuSampler` for a
:class:`GpuSnapshot` once per period. Two sources implement it: real NVML
(:mod:`._nvml_samples`) and a replay of real NVML recordings (:mod:`._replay`), which is
what CI runs because it has no GPU. Both follow NVML's own semantics for per-process
utilisation: a process's SM/memory-bandwidth share only changes when the driver produced a
new sample for it, so the last value is held in between, and it is ``None`` until the
first sample exists (a process that just started, or one NVML never sampled).

Units are base units: ratios 0..1, bytes, watts, degrees Celsius, hertz.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ._errors import GpuError

__all__ = ["DeviceSample", "GpuSampler", "GpuSnapshot", "ProcessSample", "SampleSourceError"]


class SampleSourceError(GpuError):
    """The sample source cannot be used (no NVML, an unreadable or malformed recording), or
    one sample failed (an NVML query of a GPU that is lost).

    Neither permanent nor temporary by class, because the caller knows which from where it
    stands: when a source is opened it cannot be used by this process (the message says how
    to fix it: install the driver, choose another source, re-record the file); during a run
    one period failed and the next may succeed.
    """


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One GPU at one moment. ``None`` means the driver could not answer that query."""

    index: int
    uuid: str
    name: str
    utilization_ratio: float | None
    memory_bandwidth_ratio: float | None
    memory_used_bytes: int
    memory_total_bytes: int
    power_watts: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    ecc_errors_total: int | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    xid_errors_total: int | None = None  # critical XID events seen since the sampler started
    last_xid: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process on one GPU; ``pid`` is as the driver sees it (the host PID namespace)."""

    pid: int
    gpu_uuid: str
    sm_utilization_ratio: float | None
    memory_bandwidth_ratio: float | None
    memory_used_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Everything one sampling pass saw; ``sampled_at`` is Unix seconds."""

    sampled_at: float
    devices: tuple[DeviceSample, ...]
    processes: tuple[ProcessSample, ...]
    simulated: bool = False


@runtime_checkable
class GpuSampler(Protocol):
    """A source of GPU snapshots. ``sample`` is cheap enough to call every 100 ms."""

    def sample(self) -> GpuSnapshot: ...

    def close(self) -> None: ...
