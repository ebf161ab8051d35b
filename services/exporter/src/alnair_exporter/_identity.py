"""PID → workload: the small interface the attribution needs, and its cgroup implementation.

NVML reports GPU processes by host PID. The exporter learns the owner of a PID in two ways:
the interceptor's region lists the PIDs attached to each workload (both modes), and for
processes that run without the interceptor a :class:`PidResolver` is asked. On Kubernetes
the resolver reads the PID's cgroup path, whose ``pod<uid>`` level names the pod (the
kubelet's layout for both the systemd and cgroupfs drivers; ``_`` stands for ``-`` under
systemd). ``alnair_kubelet``'s identity helper answers the same question with the
PodResources API on top and can be passed in its place.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

_POD_UID = re.compile(
    r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})"
)


class PidResolver(Protocol):
    def workload_uid(self, pid: int) -> str | None:
        """The uid of the workload ``pid`` belongs to, or None when it belongs to none known."""
        ...


class CgroupPodResolver:
    """Pod UID from ``/proc/<pid>/cgroup`` (None for a process outside any pod)."""

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.proc = proc_root

    def workload_uid(self, pid: int) -> str | None:
        try:
            text = (self.proc / str(pid) / "cgroup").read_text()
        except OSError:
            return None  # exited, or another PID namespace: not ours to name
        match = _POD_UID.search(text)
        return match.group(1).replace("_", "-").lower() if match else None


class StaticResolver:
    """A fixed PID → uid table (benchmarks, and nodes where identity comes from elsewhere)."""

    def __init__(self, table: dict[int, str]) -> None:
        self.table = dict(table)

    def workload_uid(self, pid: int) -> str | None:
        return self.table.get(pid)
