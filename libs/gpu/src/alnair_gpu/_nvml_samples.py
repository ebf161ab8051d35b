"""Device and per-process samples from real NVML (nvidia-ml-py), behind :class:`GpuSampler`.

Per-process utilisation comes from ``nvmlDeviceGetProcessUtilization(since)``, which only
returns processes the driver sampled after ``since``; between such samples the last value
is held (what the replay of recordings does too), so a process does not flicker to "no data"
on every other call. Memory per process comes from the running compute processes.

XID errors come from an NVML event set drained (without waiting) on every sample: a count
per GPU since the sampler started and the last XID seen, as dcgm-exporter's
``DCGM_FI_DEV_XID_ERRORS`` reports it.

A query the device does not support (power on some boards, ECC with ECC off) yields ``None``
for that field rather than an error: a sampler that fails every period because one board
lacks a sensor would hide all the other measurements.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ._samples import DeviceSample, GpuSnapshot, ProcessSample, SampleSourceError

__all__ = ["NvmlSampler"]


class NvmlSampler:
    """Samples every GPU NVML sees. Construct once; ``close`` shuts NVML down."""

    def __init__(self) -> None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError as e:
            raise SampleSourceError("nvidia-ml-py is not installed: `pip install nvidia-ml-py`") from e
        self._nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise SampleSourceError(
                f"NVML did not initialise ({e}); run on a node with the NVIDIA driver, or choose the "
                "replay source (ALNAIR_GPU_SOURCE=replay) where there is no GPU"
            ) from e
        nv = self._nv
        try:
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
            self._uuids = [str(nv.nvmlDeviceGetUUID(h)) for h in self._handles]
            self._names = [str(nv.nvmlDeviceGetName(h)) for h in self._handles]
        except nv.NVMLError as e:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()
            raise SampleSourceError(f"NVML cannot list the GPUs ({e}); check the driver with nvidia-smi") from e
        self._since = [int(time.time() * 1e6)] * len(self._handles)
        self._held: dict[tuple[int, str], tuple[float | None, float | None]] = {}
        self._xids: dict[str, tuple[int, int]] = {}  # uuid -> (count, last xid)
        self._events = self._xid_events()

    def _xid_events(self) -> Any:
        """An event set for critical XIDs on every GPU; None where the driver offers none."""
        nv = self._nv
        try:
            events = nv.nvmlEventSetCreate()
        except nv.NVMLError:
            return None
        for h in self._handles:
            try:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, events)
            except nv.NVMLError:
                continue  # this board reports no XIDs; the others still do
        return events

    def _drain_xids(self) -> None:
        nv = self._nv
        if self._events is None:
            return
        for _ in range(256):  # bounded: a storm of XIDs must not stall a sampling period
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:
                return  # NVMLError_Timeout: nothing pending
            uuid = str(nv.nvmlDeviceGetUUID(data.device))
            count, _ = self._xids.get(uuid, (0, 0))
            self._xids[uuid] = (count + 1, int(data.eventData))

    def _try(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nv.NVMLError:
            return None

    def _device(self, i: int, h: Any) -> DeviceSample:
        nv = self._nv
        util = self._try(nv.nvmlDeviceGetUtilizationRates, h)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        power = self._try(nv.nvmlDeviceGetPowerUsage, h)
        clock = self._try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        temp = self._try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        ecc = self._try(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        nv.NVML_VOLATILE_ECC)
        tx = self._try(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
        rx = self._try(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
        xid_count, last_xid = self._xids.get(self._uuids[i], (0, None))
        return DeviceSample(
            index=i, uuid=self._uuids[i], name=self._names[i],
            utilization_ratio=None if util is None else util.gpu / 100.0,
            memory_bandwidth_ratio=None if util is None else util.memory / 100.0,
            memory_used_bytes=int(mem.used), memory_total_bytes=int(mem.total),
            power_watts=None if power is None else power / 1000.0,
            temperature_celsius=None if temp is None else float(temp),
            sm_clock_hertz=None if clock is None else clock * 1e6,
            ecc_errors_total=None if ecc is None else int(ecc),
            pcie_tx_bytes_per_second=None if tx is None else tx * 1000.0,
            pcie_rx_bytes_per_second=None if rx is None else rx * 1000.0,
            xid_errors_total=xid_count if self._events is not None else None, last_xid=last_xid,
        )

    def _processes(self, i: int, h: Any) -> list[ProcessSample]:
        nv, uuid = self._nv, self._uuids[i]
        running = self._try(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
        memory = {int(p.pid): p.usedGpuMemory for p in running}
        for s in self._try(nv.nvmlDeviceGetProcessUtilization, h, self._since[i]) or []:
            self._since[i] = max(self._since[i], int(s.timeStamp))
            self._held[(int(s.pid), uuid)] = (s.smUtil / 100.0, s.memUtil / 100.0)
        out = []
        for pid, used in memory.items():
            sm, bw = self._held.get((pid, uuid), (None, None))
            out.append(ProcessSample(pid, uuid, sm, bw, None if used is None else int(used)))
        live = set(memory)
        for key in [k for k in self._held if k[1] == uuid and k[0] not in live]:
            del self._held[key]  # exited: forget, or a reused PID would inherit its value
        return out

    def sample(self) -> GpuSnapshot:
        now = time.time()
        self._drain_xids()
        devices, processes = [], []
        for i, h in enumerate(self._handles):
            try:
                devices.append(self._device(i, h))
                processes += self._processes(i, h)
            except self._nv.NVMLError as e:
                raise SampleSourceError(f"NVML query of GPU {i} ({self._uuids[i]}) failed: {e}") from e
        return GpuSnapshot(now, tuple(devices), tuple(processes), simulated=False)

    def close(self) -> None:
        try:
            if self._events is not None:
                self._nv.nvmlEventSetFree(self._events)
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass
