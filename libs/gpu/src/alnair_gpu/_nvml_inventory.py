"""The real GPUs of this machine, through NVML (nvidia-ml-py), with XID and device-lost health.

SM count: NVML has no SM count. We ask the CUDA driver (``cuDeviceGetAttribute`` with
``CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`` through ctypes on ``libcuda.so.1``, matching
devices by UUID because CUDA and NVML may number them differently). Where libcuda is absent
we fall back to NVML's CUDA core count divided by the cores per SM of the compute capability;
where neither works the SM count is 0 and a warning says so.

Health: critical XID events (``nvmlEventSetWait``) mark a GPU unhealthy, except the XIDs an
application causes by itself (13, 31, 43, 45, 68, 109: illegal address, page fault, a killed
context...), which say nothing about the card. A GPU that stops answering NVML is marked lost.
NVML has no "recovered" event: a lost GPU that answers again, or a GPU that saw no further XID
for ``xid_quiet_seconds``, is reported healthy again.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ._errors import GpuUnavailableError
from ._inventory import GpuInfo, HealthEvent, NodeGpus

log = logging.getLogger("alnair.gpu")

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# CUDA cores per SM by compute capability (CUDA C Programming Guide, "Arithmetic Instructions").
CORES_PER_SM = {(7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
                (9, 0): 128, (10, 0): 128, (10, 1): 128, (12, 0): 128}
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


class NvmlInventory:
    """An :class:`InventorySource` over NVML. ``nvml`` and ``clock`` are seams for tests."""

    def __init__(self, *, nvml: ModuleType | None = None, xid_quiet_seconds: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if nvml is None:
            import pynvml as nvml
        self._nv: Any = nvml
        self._clock = clock
        self.xid_quiet_seconds = xid_quiet_seconds
        try:
            self._nv.nvmlInit()
        except self._nv.NVMLError as e:
            raise GpuUnavailableError(
                f"NVML cannot start ({e}); is the NVIDIA driver installed and libnvidia-ml.so.1 visible "
                "to this container? Without a GPU use a recorded or simulated inventory (e.g. sim:2x80)"
            ) from e
        self._lock = threading.Lock()
        self._unhealthy: dict[str, tuple[str, float, bool]] = {}  # uuid -> (reason, since, lost)
        self._sms = _cuda_sm_counts()
        self._static = self._read_static()
        self._events = self._register_events()

    def _read_static(self) -> NodeGpus:
        nv = self._nv
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(nv.nvmlDeviceGetUUID(h))
            gpus.append(GpuInfo(uuid=uuid, index=i, model=_text(nv.nvmlDeviceGetName(h)),
                                memory_bytes=int(nv.nvmlDeviceGetMemoryInfo(h).total),
                                sm_count=self._sm_count(h, uuid)))
        cuda = nv.nvmlSystemGetCudaDriverVersion_v2()
        return NodeGpus(gpus=tuple(gpus), simulated=False,
                        driver_version=_text(nv.nvmlSystemGetDriverVersion()),
                        cuda_version=f"{cuda // 1000}.{(cuda % 1000) // 10}")

    def _sm_count(self, handle: Any, uuid: str) -> int:
        if uuid in self._sms:
            return self._sms[uuid]
        nv = self._nv
        try:
            cores = nv.nvmlDeviceGetNumGpuCores(handle)
            cc = tuple(nv.nvmlDeviceGetCudaComputeCapability(handle))
            return cores // CORES_PER_SM[cc]
        except (nv.NVMLError, KeyError, AttributeError) as e:
            log.warning("SM count unknown for %s (no libcuda, and NVML cores/arch failed: %r); reporting 0", uuid, e)
            return 0

    def _register_events(self) -> Any:
        nv = self._nv
        try:
            events = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            log.warning("NVML event set unavailable (%s); XID errors will not be seen", e)
            return None
        for g in self._static.gpus:
            try:
                h = nv.nvmlDeviceGetHandleByIndex(g.index)
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, events)
            except nv.NVMLError as e:
                log.warning("XID events not supported on %s (%s); only device loss is detected", g.uuid, e)
        return events

    def inventory(self) -> NodeGpus:
        with self._lock:
            nodes = self._static
            for uuid, (reason, _, _) in self._unhealthy.items():
                nodes = nodes.apply(HealthEvent(uuid=uuid, healthy=False, reason=reason))
            return nodes

    def wait_health_event(self, timeout: float) -> HealthEvent | None:
        event = self._check_lost_and_recovered()
        if event is not None:
            return event
        if self._events is None:
            time.sleep(max(0.0, timeout))
            return None
        nv = self._nv
        try:
            data = nv.nvmlEventSetWait_v2(self._events, int(max(0.0, timeout) * 1000))
        except nv.NVMLError_Timeout:
            return None
        except nv.NVMLError as e:
            log.warning("NVML event wait failed: %s", e)
            return None
        xid = int(data.eventData)
        if xid in APPLICATION_XIDS:
            log.info("application XID %d ignored (not a device fault)", xid)
            return None
        uuid = _text(nv.nvmlDeviceGetUUID(data.device))
        reason = f"XID {xid}: critical error reported by the driver"
        with self._lock:
            self._unhealthy[uuid] = (reason, self._clock(), False)
        return HealthEvent(uuid=uuid, healthy=False, reason=reason, xid=xid)

    def _check_lost_and_recovered(self) -> HealthEvent | None:
        """One pass over the GPUs: a newly lost one, or one that came back, is an event."""
        nv = self._nv
        for g in self._static.gpus:
            try:
                h = nv.nvmlDeviceGetHandleByIndex(g.index)
                nv.nvmlDeviceGetMemoryInfo(h)
                answering = True
            except nv.NVMLError as e:
                answering, error = False, e
            with self._lock:
                state = self._unhealthy.get(g.uuid)
                if not answering and (state is None or not state[2]):
                    reason = f"device lost: NVML does not answer ({error})"
                    self._unhealthy[g.uuid] = (reason, self._clock(), True)
                    return HealthEvent(uuid=g.uuid, healthy=False, reason=reason)
                if answering and state is not None and (
                    state[2] or self._clock() - state[1] >= self.xid_quiet_seconds
                ):
                    del self._unhealthy[g.uuid]
                    return HealthEvent(uuid=g.uuid, healthy=True, reason="answering again")
        return None

    def close(self) -> None:
        nv = self._nv
        try:
            if self._events is not None:
                nv.nvmlEventSetFree(self._events)
            nv.nvmlShutdown()
        except nv.NVMLError as e:
            log.warning("NVML shutdown: %s", e)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cuda_sm_counts() -> dict[str, int]:
    """SM count per GPU UUID from the CUDA driver API; empty when libcuda is not loadable."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        for name in ("cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
                     "cuDeviceGetUuid"):
            getattr(cuda, name)
    except (OSError, AttributeError):  # no driver, or one without these (older than CUDA 9.2)
        return {}
    if cuda.cuInit(0) != 0:
        return {}
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return {}
    found = {}
    for ordinal in range(count.value):
        dev, sms, raw = ctypes.c_int(), ctypes.c_int(), (ctypes.c_ubyte * 16)()
        if (cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0
                or cuda.cuDeviceGetAttribute(ctypes.byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != 0
                or cuda.cuDeviceGetUuid(raw, dev) != 0):
            continue
        h = bytes(raw).hex()
        found[f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"] = sms.value
    return found
