"""The exception tree of alnair_gpu.

Everything this package raises derives from :class:`GpuError`, itself an
:class:`alnair_common.AlnairError`. An inventory that cannot be read at all (no driver, a bad
recording, a bad ``sim:`` spec) is an error; a single GPU that fails is not — it is reported
in the inventory as unhealthy with the reason, so the node keeps serving its other GPUs.

Retry or not: :class:`GpuUnavailableError` is temporary (the driver may come up, the container
may be restarted with it); :class:`InventoryFormatError` is permanent (the input must change).
:class:`~alnair_gpu.SampleSourceError` and a bare :class:`GpuError` are neither by class: the
caller knows which it is from where it stands (see their docstrings).
"""

from __future__ import annotations

from alnair_common import AlnairError, PermanentError, TemporaryError


class GpuError(AlnairError):
    """Root of every error raised by alnair_gpu."""


class GpuUnavailableError(GpuError, TemporaryError):
    """NVML (the driver) cannot be loaded or initialised on this machine."""


class InventoryFormatError(GpuError, PermanentError):
    """A recorded inventory or a simulated-GPU spec is malformed; the message says how to fix it."""
