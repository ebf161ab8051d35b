"""Per-pod host usage (cgroup v2, /proc) in the names cAdvisor users will recognise."""

from __future__ import annotations

from prometheus_client.core import Metric

from .._host import CLOCK_TICKS
from .._view import NodeView
from ._base import POD_LABELS, ViewCollector, add, counter, gauge, label_set, pod_labels

_COUNTERS = (
    ("alnair_pod_cpu_seconds", "cpu_seconds_total", "CPU time of the pod's cgroups, seconds."),
    ("alnair_pod_disk_read_bytes", "disk_read_bytes_total", "Bytes the pod's cgroups read from block devices."),
    ("alnair_pod_disk_written_bytes", "disk_write_bytes_total", "Bytes the pod's cgroups wrote to block devices."),
    ("alnair_pod_network_receive_bytes", "network_receive_bytes_total",
     "Bytes received on the pod's network interfaces (loopback excluded)."),
    ("alnair_pod_network_transmit_bytes", "network_transmit_bytes_total",
     "Bytes sent on the pod's network interfaces (loopback excluded)."),
)


class HostCollector(ViewCollector):
    def families(self, view: NodeView) -> list[Metric]:
        families: list[Metric] = []
        hosts = [(label_set(POD_LABELS, pod_labels(s.workload, view.node)), s.host.counters)
                 for s in view.series if s.host is not None]
        for name, attr, doc in _COUNTERS:
            c = counter(name, doc, POD_LABELS)
            for labels, counters in hosts:
                value = getattr(counters, attr)
                if value is not None:
                    add(c, labels, float(value))
            families.append(c)
        # The seed exporter's name, kept so its dashboards work: user-mode CPU time in clock
        # ticks (USER_HZ, what /proc/<pid>/stat counts; "hertz" in the seed's name). New
        # dashboards should use alnair_pod_cpu_seconds_total.
        ticks = counter("alnair_cpustat_time_user_hertz",
                        f"User-mode CPU time of the pod's cgroups (outside pods: its processes), in clock "
                        f"ticks of 1/{CLOCK_TICKS} s (seed name).", POD_LABELS)
        for labels, counters in hosts:
            if counters.cpu_user_seconds_total is not None:
                add(ticks, labels, float(round(counters.cpu_user_seconds_total * CLOCK_TICKS)))
        families.append(ticks)
        memory = gauge("alnair_pod_memory_bytes", "Memory charged to the pod's cgroups, bytes.", POD_LABELS)
        for labels, counters in hosts:
            if counters.memory_bytes is not None:
                add(memory, labels, float(counters.memory_bytes))
        families.append(memory)
        return families
