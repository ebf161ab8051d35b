"""Workload → its processes, for workloads that have no GPU process to be found by.

GPU processes and CUDA regions name their workloads; a CPU stage of a pipeline, a workload on
a simulated card or one that has not touched the GPU yet has neither, yet its profile needs
CPU, memory, disk and network. So the exporter also asks, for every workload the directory
knows and that has not finished, which processes are its own:

* local mode: the agent records each workload's reaper in ``<workspaces>/<uid>/pid``
  (``"<pid> <start time>"``); the workload is that process and its descendants
  (``/proc/<pid>/task/<tid>/children``), the start time guarding against a reused PID;
* Kubernetes: the pod's cgroup (``…pod<uid>…`` under the cgroup root); one process per
  container cgroup is enough, as :class:`HostReader` accounts the whole pod cgroup and reads
  the network of each distinct namespace once.

Both return nothing for a workload that is not on this machine, so no node filter is needed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

MAX_PIDS = 4096  # per workload: a fork bomb must not make a sample period unbounded
_POD_DIR = re.compile(r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class WorkloadPids:
    """``pids(uids)`` → uid → PIDs, from the local agent's workspaces and the pod cgroups."""

    def __init__(self, workspaces: Path | None, proc_root: Path = Path("/proc"),
                 cgroup_root: Path | None = Path("/sys/fs/cgroup")) -> None:
        self.workspaces = workspaces
        self.proc = str(proc_root)
        self.cgroup_root = cgroup_root

    def pids(self, uids: Iterable[str]) -> dict[str, set[int]]:
        wanted = set(uids)
        found: dict[str, set[int]] = {}
        pods = self._pod_cgroups(wanted) if self.cgroup_root is not None else {}
        for uid in wanted:
            pids = self._tree(uid) if self.workspaces is not None else set()
            if uid in pods:
                pids |= self._cgroup_pids(pods[uid])
            if pids:
                found[uid] = pids
        return found

    # -- local mode ---------------------------------------------------------------------------

    def _start_time(self, pid: int) -> str | None:
        stat = _read(f"{self.proc}/{pid}/stat")
        fields = stat.rsplit(")", 1)[-1].split() if stat else []
        return fields[19] if len(fields) > 19 else None

    def _tree(self, uid: str) -> set[int]:
        assert self.workspaces is not None
        record = _read(str(self.workspaces / uid / "pid"))
        try:
            pid_text, started = (record or "").split()
            root = int(pid_text)
        except ValueError:
            return set()  # no record (a Kubernetes pod), or being written: next period
        if self._start_time(root) != started:
            return set()  # the reaper is gone; its PID may be someone else's now
        seen, todo = {root}, [root]
        while todo and len(seen) < MAX_PIDS:
            pid = todo.pop()
            try:
                tasks = os.listdir(f"{self.proc}/{pid}/task")
            except OSError:
                continue
            for tid in tasks:
                for child in (_read(f"{self.proc}/{pid}/task/{tid}/children") or "").split():
                    if int(child) not in seen:
                        seen.add(int(child))
                        todo.append(int(child))
        return seen

    # -- Kubernetes ---------------------------------------------------------------------------

    def _pod_cgroups(self, wanted: set[str]) -> dict[str, str]:
        """uid → pod cgroup directory, for the wanted uids found under the kubepods tree
        (systemd driver: ``kubepods-burstable-pod<uid_with_underscores>.slice``; cgroupfs:
        ``pod<uid>``); at most four levels deep."""
        assert self.cgroup_root is not None
        out: dict[str, str] = {}
        todo = [(str(self.cgroup_root), 0)]
        while todo:
            path, depth = todo.pop()
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for e in entries:
                if not e.is_dir(follow_symlinks=False):
                    continue
                m = _POD_DIR.search(e.name)
                if m is not None:
                    uid = m.group(1).replace("_", "-")
                    if uid in wanted:
                        out[uid] = e.path
                elif depth < 3 and (depth > 0 or e.name.startswith("kubepods")):
                    todo.append((e.path, depth + 1))
        return out

    @staticmethod
    def _cgroup_pids(pod_dir: str) -> set[int]:
        """One process of each cgroup under the pod's (a container, its pause process)."""
        pids: set[int] = set()
        for dirpath, _dirs, _files in os.walk(pod_dir):
            first = (_read(f"{dirpath}/cgroup.procs") or "").split()[:1]
            pids.update(int(p) for p in first)
        return pids
