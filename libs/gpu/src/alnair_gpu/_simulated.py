"""Simulated GPUs for machines without one (``alnair up --gpus sim:2x80``).

They let the scheduler and the tools run anywhere; they are marked ``simulated`` in every
inventory, and their UUIDs and model say so too, so nobody mistakes them for hardware.
"""

from __future__ import annotations

import re

from ._errors import InventoryFormatError
from ._injected_health import InjectedHealth
from ._inventory import GIB, GpuInfo, NodeGpus

_SPEC = re.compile(r"^sim:(\d+)x(\d+)$")
MAX_GPUS = 64
MAX_GIB = 4096


class SimulatedInventory(InjectedHealth):
    """N identical simulated GPUs of G GiB each."""

    @classmethod
    def parse(cls, spec: str, *, sm_count: int = 132) -> SimulatedInventory:
        """``sim:<count>x<GiB>``, e.g. ``sim:2x80`` for two 80 GiB GPUs."""
        m = _SPEC.match(spec.strip())
        if not m:
            raise InventoryFormatError(
                f"{spec!r} is not a simulated GPU spec: write sim:<count>x<GiB>, e.g. sim:2x80"
            )
        count, gib = int(m.group(1)), int(m.group(2))
        if not 1 <= count <= MAX_GPUS or not 1 <= gib <= MAX_GIB:
            raise InventoryFormatError(
                f"{spec!r}: {count} GPUs of {gib} GiB; expected 1..{MAX_GPUS} GPUs of 1..{MAX_GIB} GiB"
            )
        gpus = tuple(
            GpuInfo(uuid=f"GPU-sim-{i:04d}-{gib}g", index=i, model=f"Simulated GPU ({gib} GiB)",
                    memory_bytes=gib * GIB, sm_count=sm_count)
            for i in range(count)
        )
        return cls(NodeGpus(gpus=gpus, simulated=True, driver_version="simulated", cuda_version="simulated"))
