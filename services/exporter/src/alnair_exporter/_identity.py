"""PID → workload: the small interface the attribution needs, and its cgroup implementation.

NVML reports GPU processes by host PID. The exporter learns the owner of a PID in two ways:
the interceptor's region lists the PIDs attached to each workload (both modes), and for
processes that run without the interceptor a :class:`PidResolver` is asked. Locally the
agent's records of each workload's reaper process answer (:class:`WorkspacePidResolver`). On Kubernetes
the resolver reads the PID's cgroup path, whose ``pod<uid>`` level names the pod
(``alnair_kubelet.identify_pid``: containerd and CRI-O, systemd and cgroupfs drivers).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


class WorkspacePidResolver:
    """Local mode without the interceptor: the local agent records each workload's reaper as
    ``<workspaces>/<uid>/pid`` (``"<pid> <start time>"``); a GPU process belongs to the workload
    whose reaper is among its ancestors. The start time (field 22 of ``/proc/<pid>/stat``)
    guards against a reused PID. The table is re-read at most once per ``refresh_seconds``.
    """

    def __init__(self, workspaces: Path, proc_root: Path = Path("/proc"), *, refresh_seconds: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.workspaces = workspaces
        self.proc = proc_root
        self.refresh = refresh_seconds
        self.clock = clock
        self._reapers: dict[int, list[tuple[str, str]]] = {}
        self._loaded_at: float | None = None

    def _table(self) -> dict[int, list[tuple[str, str]]]:
        now = self.clock()
        if self._loaded_at is None or now - self._loaded_at >= self.refresh:
            table: dict[int, list[tuple[str, str]]] = {}
            for path in self.workspaces.glob("*/pid"):
                try:
                    pid, started = path.read_text().split()
                    table.setdefault(int(pid), []).append((path.parent.name, started))
                except (OSError, ValueError):
                    continue  # being written, or not the agent's file: next refresh
            self._reapers, self._loaded_at = table, now
        return self._reapers

    def _stat(self, pid: int) -> tuple[int, str] | None:
        """(parent pid, start time) of ``pid``."""
        try:
            text = (self.proc / str(pid) / "stat").read_text()
        except OSError:
            return None
        fields = text.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ')'
        return (int(fields[1]), fields[19]) if len(fields) > 19 else None

    def workload_uid(self, pid: int) -> str | None:
        table = self._table()
        if not table:
            return None
        for _ in range(64):  # bounded walk up the process tree
            stat = self._stat(pid)
            if stat is None:
                return None
            for uid, started in table.get(pid, ()):
                if started == stat[1]:  # a finished workload's reused PID does not match
                    return uid
            if stat[0] <= 1:
                return None
            pid = stat[0]
        return None


class ChainResolver:
    """Asks each resolver in turn (cgroup first, then the local agent's workspaces)."""

    def __init__(self, *resolvers: PidResolver) -> None:
        self.resolvers = resolvers

    def workload_uid(self, pid: int) -> str | None:
        for resolver in self.resolvers:
            if (uid := resolver.workload_uid(pid)) is not None:
                return uid
        return None


class StaticResolver:
    """A fixed PID → uid table (benchmarks, and nodes where identity comes from elsewhere)."""

    def __init__(self, table: dict[int, str]) -> None:
        self.table = dict(table)

    def workload_uid(self, pid: int) -> str | None:
        return self.table.get(pid)
