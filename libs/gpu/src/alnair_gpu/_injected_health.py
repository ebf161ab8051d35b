"""Health events for sources without a driver: whatever a test or an operator injects.

Recorded and simulated GPUs cannot fail by themselves; the device plugin's health path must
still be exercised end to end, so these sources take events through :meth:`inject` and hand
them out through the same blocking ``wait_health_event`` that NVML has.
"""

from __future__ import annotations

import queue
import threading

from ._errors import GpuError
from ._inventory import HealthEvent, NodeGpus


class InjectedHealth:
    """Holds a fixed inventory and applies injected health events to it."""

    def __init__(self, node_gpus: NodeGpus) -> None:
        self._gpus = node_gpus
        self._lock = threading.Lock()
        self._events: queue.Queue[HealthEvent] = queue.Queue()

    def inventory(self) -> NodeGpus:
        with self._lock:
            return self._gpus

    def inject(self, event: HealthEvent) -> None:
        """Make ``event`` happen: the inventory changes now, waiters see the event next."""
        with self._lock:
            if self._gpus.by_uuid(event.uuid) is None:
                known = ", ".join(g.uuid for g in self._gpus.gpus) or "none"
                raise GpuError(f"no GPU {event.uuid!r} on this node (known: {known})")
            self._gpus = self._gpus.apply(event)
        self._events.put(event)

    def wait_health_event(self, timeout: float) -> HealthEvent | None:
        try:
            return self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def close(self) -> None:
        """Nothing to release."""
