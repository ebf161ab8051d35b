"""The exporter's Prometheus collectors, registered in one place: :data:`COLLECTORS`.

Adding a metric family = a new module with one :class:`ViewCollector` subclass and one line
below; nothing else changes.
"""

from ._allocation import AllocationCollector
from ._base import ViewCollector, ViewSource
from ._cuda import CudaCollector
from ._device import DeviceCollector
from ._host import HostCollector
from ._pod_gpu import PodGpuCollector

COLLECTORS: tuple[type[ViewCollector], ...] = (
    DeviceCollector, PodGpuCollector, CudaCollector, HostCollector, AllocationCollector,
)

__all__ = [
    "COLLECTORS",
    "AllocationCollector",
    "CudaCollector",
    "DeviceCollector",
    "HostCollector",
    "PodGpuCollector",
    "ViewCollector",
    "ViewSource",
]
