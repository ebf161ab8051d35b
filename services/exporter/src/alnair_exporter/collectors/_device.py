"""Device metrics in the units dcgm-exporter users expect, one series per GPU.

Mapping: ``DCGM_FI_DEV_GPU_UTIL`` → ``alnair_gpu_utilization_ratio``,
``DCGM_FI_DEV_MEM_COPY_UTIL`` → ``alnair_gpu_memory_bandwidth_utilization_ratio``,
``DCGM_FI_DEV_FB_USED``/``FB_FREE`` → ``alnair_gpu_memory_used_bytes``/``_total_bytes``,
``DCGM_FI_DEV_POWER_USAGE`` → ``alnair_gpu_power_watts``, ``DCGM_FI_DEV_GPU_TEMP`` →
``alnair_gpu_temperature_celsius``, ``DCGM_FI_DEV_SM_CLOCK`` (MHz) → ``alnair_gpu_sm_clock_hertz``,
``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` → ``alnair_gpu_ecc_uncorrected_errors_total``,
``DCGM_FI_DEV_XID_ERRORS`` → ``alnair_gpu_xid_errors_total`` (count since the exporter
started) and ``alnair_gpu_last_xid``. A query
the board does not answer leaves its series out rather than reporting a false zero.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from .._view import NodeView
from ._base import DEVICE_LABELS, ViewCollector, counter, gauge

_GAUGES = (
    ("alnair_gpu_utilization_ratio", "utilization_ratio", "Share of the last period the GPU ran kernels, 0..1."),
    ("alnair_gpu_memory_bandwidth_utilization_ratio", "memory_bandwidth_ratio",
     "Share of the last period device memory was read or written, 0..1."),
    ("alnair_gpu_memory_used_bytes", "memory_used_bytes", "Device memory in use, bytes."),
    ("alnair_gpu_memory_total_bytes", "memory_total_bytes", "Device memory, bytes."),
    ("alnair_gpu_power_watts", "power_watts", "Power draw, watts."),
    ("alnair_gpu_temperature_celsius", "temperature_celsius", "GPU core temperature, degrees Celsius."),
    ("alnair_gpu_sm_clock_hertz", "sm_clock_hertz", "SM clock, hertz."),
    ("alnair_gpu_pcie_transmit_bytes_per_second", "pcie_tx_bytes_per_second", "PCIe transmit throughput, bytes/s."),
    ("alnair_gpu_pcie_receive_bytes_per_second", "pcie_rx_bytes_per_second", "PCIe receive throughput, bytes/s."),
)


class DeviceCollector(ViewCollector):
    def families(self, view: NodeView) -> list[Metric]:
        families = []
        for name, attr, doc in _GAUGES:
            g = gauge(name, doc, DEVICE_LABELS)
            for d in view.devices:
                value = getattr(d, attr)
                if value is not None:
                    g.add_metric([view.node, str(d.index), d.uuid, d.name], float(value))
            families.append(g)
        ecc = counter("alnair_gpu_ecc_uncorrected_errors", "Uncorrected (volatile) ECC errors since the "
                      "driver loaded.", DEVICE_LABELS)
        for d in view.devices:
            if d.ecc_errors_total is not None:
                ecc.add_metric([view.node, str(d.index), d.uuid, d.name], float(d.ecc_errors_total))
        families.append(ecc)
        xids = counter("alnair_gpu_xid_errors", "Critical XID events since the exporter started.", DEVICE_LABELS)
        last = gauge("alnair_gpu_last_xid", "The last critical XID the driver reported (0: none).", DEVICE_LABELS)
        for d in view.devices:
            labels = [view.node, str(d.index), d.uuid, d.name]
            if d.xid_errors_total is not None:
                xids.add_metric(labels, float(d.xid_errors_total))
                last.add_metric(labels, float(d.last_xid or 0))
        families += [xids, last]
        return families
