"""A workload's directory: what the agent, the interceptor and `alnair run`/`logs` share.

``<data dir>/workloads/<uid>/`` holds ``environment.json`` (the submitting shell's
environment, written by ``alnair run`` before it submits, readable by its user only: it
never travels on the bus, where JetStream would keep it and anyone subscribed would see it),
``submission.pb`` (the Workload as submitted), ``limits`` and ``cuda.region`` (the
interceptor's, laid out by :mod:`alnair_common.cuda_handoff`), ``output.log`` (stdout and
stderr), ``pid`` (the reaper's pid and start time, to recognise it after an agent restart),
``child.pid`` (the command's pid), ``usage.json`` (what its processes used in all) and
``exit_code`` (all three written by the reaper); a training
job's worker also writes ``progress`` (its newest step, relayed to the controller).

The directory is the platform user's only
(:data:`~alnair_common.cuda_handoff.LOCAL_WORKSPACE_MODE`): no other user of the machine can
read the environment or write the limits or the region. Every local workload runs as that
same user, though, so the operating system cannot keep one local workload out of another's
workspace, nor out of its own limits file: local mode's limits hold against mistakes, not
against a workload that sets out to escape them (``native/cuda_intercept/README.md``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from alnair.v1 import workload_pb2 as wl
from alnair_common.cuda_handoff import LOCAL_WORKSPACE_MODE, CudaShare, write_limits


@dataclass(frozen=True)
class Workspace:
    path: Path

    @classmethod
    def of(cls, workloads_dir: Path, uid: str) -> Workspace:
        return cls(workloads_dir / uid)

    @property
    def output(self) -> Path:
        return self.path / "output.log"

    @property
    def exit_file(self) -> Path:
        return self.path / "exit_code"

    def create(self, submission: wl.Workload) -> None:
        make_private_directory(self.path)
        _write(self.path / "submission.pb", submission.SerializeToString())

    def write_environment(self, env: dict[str, str]) -> None:
        """The submitter's environment, for the agent to start the command with (mode 0600)."""
        make_private_directory(self.path)
        write_environment(self.path / "environment.json", env)

    def environment(self) -> dict[str, str] | None:
        """What ``write_environment`` left; None when absent or unreadable."""
        return read_environment(self.path / "environment.json")

    def write_worker_environment(self, env: dict[str, str]) -> None:
        """A training job's worker: the variables the agent sets for it (``worker_env``), kept
        apart from the submitter's, which may carry no ``ALNAIR_*`` setting."""
        make_private_directory(self.path)
        write_environment(self.path / "worker_environment.json", env)

    def worker_environment(self) -> dict[str, str]:
        return read_environment(self.path / "worker_environment.json") or {}

    def submission(self) -> wl.Workload | None:
        try:
            data = (self.path / "submission.pb").read_bytes()
        except OSError:
            return None
        found = wl.Workload()
        found.ParseFromString(data)
        return found

    def write_limits(self, share: CudaShare) -> None:
        """The interceptor's limits file; the environment can only tighten it."""
        write_limits(self.path, share)

    def record_process(self, pid: int) -> None:
        record_process(self.path / "pid", pid)

    def process(self) -> tuple[int, str] | None:
        return recorded_process(self.path / "pid")

    def child_pid(self) -> int | None:
        """The command's own pid (the reaper's child), once it started."""
        try:
            return int((self.path / "child.pid").read_text())
        except (OSError, ValueError):
            return None

    def exit_code(self) -> int | None:
        try:
            return int(self.exit_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def usage(self) -> wl.ResourceUsage | None:
        """What the reaper counted for the finished workload's processes; None when it wrote
        nothing usable (an older reaper, a reaper killed first, a file that is not its)."""
        try:
            found = json.loads((self.path / "usage.json").read_text())
            return wl.ResourceUsage(**{name: _count(found[name]) for name in _USAGE_FIELDS})
        except (OSError, ValueError, TypeError, KeyError):
            return None


_USAGE_FIELDS = tuple(f.name for f in wl.ResourceUsage.DESCRIPTOR.fields)


def _count(value: object) -> float:
    """A non-negative finite number (ints for the byte fields stay ints)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ValueError(f"not a count: {value!r}")
    return value


def make_private_directory(path: Path) -> None:
    """A directory of the platform's user only (:data:`LOCAL_WORKSPACE_MODE`)."""
    path.mkdir(mode=LOCAL_WORKSPACE_MODE, parents=True, exist_ok=True)
    path.chmod(LOCAL_WORKSPACE_MODE)  # also one made before, or under another umask


def write_environment(path: Path, env: dict[str, str]) -> None:
    """A submitting shell's environment, readable by the platform's user only (0600)."""
    _write(path, json.dumps(env).encode(), mode=0o600)


def read_environment(path: Path) -> dict[str, str] | None:
    """What :func:`write_environment` left; None when absent or unreadable."""
    try:
        env = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(env, dict):
        return None
    return {str(k): str(v) for k, v in env.items()}


def record_process(pid_file: Path, pid: int) -> None:
    """``<pid> <start time>``: enough to recognise the process after an agent restart."""
    _write(pid_file, f"{pid} {process_start_time(pid)}\n".encode())


def recorded_process(pid_file: Path) -> tuple[int, str] | None:
    try:
        pid, started = pid_file.read_text().split()
        return int(pid), started
    except (OSError, ValueError):
        return None


def process_start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat: tells a process from a later one with the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def still_running(pid: int, started: str) -> bool:
    """True while the recorded process exists (and is not a zombie awaiting its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] == started and fields[0] != "Z"


def _write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)  # an older tmp file keeps its mode through O_CREAT
    os.replace(tmp, path)
