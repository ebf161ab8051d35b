"""Which container and pod a host PID belongs to, from its cgroup v2 path.

The kubelet puts every container in a cgroup whose path names the pod UID and the container
ID. We read ``/proc/<pid>/cgroup`` (the ``0::`` line of the unified hierarchy) and recognise the
path shapes of the two CRI runtimes on both cgroup drivers:

* systemd driver: ``/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
  cri-containerd-<id>.scope`` (containerd) or ``.../crio-<id>.scope`` (CRI-O); Guaranteed pods
  have no ``<qos>`` level; the UID's dashes are written as underscores. Nested setups (kind)
  prefix ``kubelet-`` to every slice.
* cgroupfs driver: ``/kubepods/<qos>/pod<uid>/<id>`` (containerd: bare 64-hex ID) or
  ``.../crio-<id>`` (CRI-O).

No Docker API and no cgroup v1 guesses: a host without the unified hierarchy is reported as
such. CRI-O's ``crio-conmon-<id>`` monitor runs beside the container, not in it, so its PIDs
map to no container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ._errors import KubeletError, UnsupportedCgroupError

_HEX_ID = r"[0-9a-f]{64}"
_UID = r"[0-9a-fA-F][0-9a-fA-F_-]{7,}"
_SYSTEMD_POD = re.compile(rf"^(?:kubelet-)?kubepods(?:-(burstable|besteffort))?-pod({_UID})\.slice$")
_CGROUPFS_POD = re.compile(rf"^pod({_UID})$")
_CONTAINER = (
    (re.compile(rf"^cri-containerd-({_HEX_ID})\.scope$"), "containerd"),
    (re.compile(rf"^crio-({_HEX_ID})\.scope$"), "cri-o"),
    (re.compile(rf"^crio-({_HEX_ID})$"), "cri-o"),
    (re.compile(rf"^({_HEX_ID})$"), "containerd"),
)
_CONMON = re.compile(rf"^crio-conmon-{_HEX_ID}(?:\.scope)?$")


@dataclass(frozen=True)
class ContainerIdentity:
    """A container of a Kubernetes pod, as its cgroup names it."""

    container_id: str
    runtime: str  # "containerd" or "cri-o"
    pod_uid: str
    qos_class: str  # "guaranteed", "burstable" or "besteffort"
    cgroup_path: str


def identify_pid(pid: int, proc_root: Path = Path("/proc")) -> ContainerIdentity | None:
    """The container ``pid`` runs in; None for a host process, a process gone, or no pod.

    Raises :class:`UnsupportedCgroupError` on a cgroup-v1-only host.
    """
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as e:
        raise KubeletError(f"cannot read {proc_root / str(pid) / 'cgroup'}: {e}") from e
    return identify_cgroup(unified_path(text, f"pid {pid}"))


def unified_path(cgroup_file: str, origin: str = "cgroup file") -> str:
    """The cgroup v2 path from the text of a ``/proc/<pid>/cgroup`` file."""
    for line in cgroup_file.splitlines():
        if line.startswith("0::"):
            return line[3:].strip()
    raise UnsupportedCgroupError(
        f"{origin}: no cgroup v2 ('0::') line in /proc/<pid>/cgroup, so this host runs cgroup v1 only; "
        "workload identity needs the unified hierarchy (boot with systemd.unified_cgroup_hierarchy=1)"
    )


def identify_cgroup(path: str) -> ContainerIdentity | None:
    """Parse one cgroup v2 path; None when it is not a pod container's cgroup."""
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        pod_uid, qos = _pod_segment(parts, i, part)
        if pod_uid is None:
            continue
        for child in parts[i + 1:]:
            if _CONMON.match(child):
                return None
            for pattern, runtime in _CONTAINER:
                m = pattern.match(child)
                if m:
                    return ContainerIdentity(container_id=m.group(1), runtime=runtime, pod_uid=pod_uid,
                                             qos_class=qos, cgroup_path=path)
        return None
    return None


def _pod_segment(parts: list[str], i: int, part: str) -> tuple[str | None, str]:
    m = _SYSTEMD_POD.match(part)
    if m and any("kubepods" in p for p in parts[:i + 1]):
        return m.group(2).replace("_", "-"), m.group(1) or "guaranteed"
    m = _CGROUPFS_POD.match(part)
    if m and "kubepods" in parts[:i]:
        qos = parts[i - 1] if parts[i - 1] in ("burstable", "besteffort") else "guaranteed"
        return m.group(1), qos
    return None, ""
