"""The exception tree of alnair_gpu.

Everything this package raises derives from :class:`GpuError`. An inventory that cannot be
read at all (no driver, a bad recording, a bad ``sim:`` spec) is an error; a single GPU that
fails is not — it is reported in the inventory as unhealthy with the reason, so the node
keeps serving its other GPUs.
"""

from __future__ import annotations


class GpuError(Exception):
    """Root of every error raised by alnair_gpu."""


class GpuUnavailableError(GpuError):
    """NVML (the driver) cannot be loaded or initialised on this machine."""


class InventoryFormatError(GpuError):
    """A recorded inventory or a simulated-GPU spec is malformed; the message says how to fix it."""
