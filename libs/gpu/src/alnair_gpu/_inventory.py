"""The GPU inventory of a node as plain data, and the source interface that produces it.

Services reason about :class:`NodeGpus` and :class:`HealthEvent`; where the data comes from
(NVML on a GPU node, a recording of a real H200 in CI, a labelled simulation on a laptop) is
an :class:`InventorySource` chosen at start-up. Health waits are blocking on purpose: NVML's
event wait is a blocking C call, so every source has the same shape and callers run it in a
thread.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

GIB = 1 << 30


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as the node sees it."""

    uuid: str
    index: int
    model: str
    memory_bytes: int
    sm_count: int
    healthy: bool = True
    health_reason: str = ""
    # MPS mode: an MPS control daemon shares the card (SM partitions), not time slices.
    mps: bool = False

    @property
    def memory_gib(self) -> int:
        """Schedulable memory in whole GiB (the unit of ``alnair/vgpu-memory``), rounded down
        so that the units handed out never exceed the card."""
        return self.memory_bytes // GIB

    def with_health(self, healthy: bool, reason: str = "") -> GpuInfo:
        return dataclasses.replace(self, healthy=healthy, health_reason="" if healthy else reason)


@dataclass(frozen=True)
class NodeGpus:
    """Every GPU of a node. ``simulated`` marks GPUs that do not exist (shown wherever used)."""

    gpus: tuple[GpuInfo, ...]
    simulated: bool = False
    driver_version: str = ""
    cuda_version: str = ""

    def by_uuid(self, uuid: str) -> GpuInfo | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def with_mps(self, on: bool = True) -> NodeGpus:
        """The inventory with every card in MPS mode (``on``) or time-sliced."""
        return dataclasses.replace(self, gpus=tuple(dataclasses.replace(g, mps=on) for g in self.gpus))

    def apply(self, event: HealthEvent) -> NodeGpus:
        """The inventory after ``event``; an event for an unknown GPU changes nothing."""
        gpus = tuple(
            g.with_health(event.healthy, event.reason) if g.uuid == event.uuid else g for g in self.gpus
        )
        return dataclasses.replace(self, gpus=gpus)


@dataclass(frozen=True)
class HealthEvent:
    """A GPU changed health: an XID error, the device fell off the bus, or it recovered."""

    uuid: str
    healthy: bool
    reason: str = ""
    xid: int | None = None


@runtime_checkable
class InventorySource(Protocol):
    """Where a node's GPUs come from."""

    def inventory(self) -> NodeGpus:
        """The GPUs now, with the health every event so far has left them in."""
        ...

    def wait_health_event(self, timeout: float) -> HealthEvent | None:
        """Block up to ``timeout`` seconds for the next health change; None when none came."""
        ...

    def close(self) -> None:
        """Release the driver or files; the source is unusable afterwards."""
        ...
