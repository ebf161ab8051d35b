"""A workload's own processes without a GPU process: the pod cgroup (both cgroup drivers) and
the local agent's reaper record (start time guards a reused PID)."""

from __future__ import annotations

import os
from pathlib import Path

from alnair_exporter._workload_pids import WorkloadPids

UID = "0f6e3c2a-1b2c-4d5e-8f90-123456789abc"


def _cgroup(root: Path, rel: str, pids: list[int]) -> None:
    (root / rel).mkdir(parents=True, exist_ok=True)
    (root / rel / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))


def test_pod_cgroup_by_uid_with_either_driver(tmp_path: Path) -> None:
    systemd, cgroupfs = tmp_path / "systemd", tmp_path / "cgroupfs"
    pod = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    _cgroup(systemd, pod, [])
    _cgroup(systemd, f"{pod}/cri-a.scope", [11, 12])
    _cgroup(systemd, f"{pod}/cri-b.scope", [13])
    _cgroup(systemd, "system.slice/pod-lookalike", [99])  # outside kubepods: never looked at
    _cgroup(cgroupfs, f"kubepods/pod{UID}/c1", [21])
    for root, expected in ((systemd, {11, 13}), (cgroupfs, {21})):
        found = WorkloadPids(None, tmp_path / "proc", root).pids([UID, "other-uid"])
        assert found == {UID: expected}  # one process per container cgroup; unknown uids absent


def test_local_reaper_and_its_descendants_only_while_the_record_matches(tmp_path: Path) -> None:
    workspaces = tmp_path / "workloads"
    (workspaces / "w1").mkdir(parents=True)
    me = os.getpid()
    started = Path(f"/proc/{me}/stat").read_text().rsplit(")", 1)[-1].split()[19]
    (workspaces / "w1" / "pid").write_text(f"{me} {started}\n")
    finder = WorkloadPids(workspaces, Path("/proc"), None)
    assert me in finder.pids(["w1"])["w1"]
    (workspaces / "w1" / "pid").write_text(f"{me} 1\n")  # a reused PID: another start time
    assert finder.pids(["w1"]) == {}
    assert finder.pids(["no-workspace"]) == {}
