"""PID → workload: the small interface the attribution needs, and its cgroup implementation.

NVML reports GPU processes by host PID. The exporter learns the owner of a PID in two ways:
the interceptor's region lists the PIDs attached to each workload (both modes), and for
processes that run without the interceptor a :class:`PidResolver` is asked. On Kubernetes
the resolver reads the PID's cgroup path, whose ``pod<uid>`` level names the pod
(``alnair_kubelet.identify_pid``: containerd and CRI-O, systemd and cgroupfs drivers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from alnair_common import get_logger
from alnair_kubelet import KubeletError, identify_pid

log = get_logger("alnair.exporter.identity")


class PidResolver(Protocol):
    def workload_uid(self, pid: int) -> str | None:
        """The uid of the workload ``pid`` belongs to, or None when it belongs to none known."""
        ...


class CgroupPodResolver:
    """Pod UID of a host PID through ``alnair_kubelet.identify_pid`` (cgroup v2 path).

    None for a process outside any pod, one that exited, or on a host without the unified
    hierarchy (said once in the log: per-process attribution then needs the interceptor).
    """

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.proc = proc_root
        self._warned = False

    def workload_uid(self, pid: int) -> str | None:
        try:
            identity = identify_pid(pid, self.proc)
        except KubeletError as e:
            if not self._warned:
                self._warned = True
                log.warning("cannot name pods from cgroups on this host", error=str(e))
            return None
        return identity.pod_uid if identity is not None else None


class StaticResolver:
    """A fixed PID → uid table (benchmarks, and nodes where identity comes from elsewhere)."""

    def __init__(self, table: dict[int, str]) -> None:
        self.table = dict(table)

    def workload_uid(self, pid: int) -> str | None:
        return self.table.get(pid)
