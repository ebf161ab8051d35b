"""Host-side usage of workloads from cgroup v2 and ``/proc``: CPU, memory, disk I/O, network.

The profiler needs these in both modes. The exporter knows a workload's PIDs (its GPU
processes, the processes attached to its CUDA region) and reads them two ways:

* A PID in a Kubernetes pod (its ``/proc/<pid>/cgroup`` line ``0::<path>`` has a
  ``pod<uid>`` level) is accounted by the pod's cgroup — every container of the pod, every
  child process: ``cpu.stat``, ``memory.current``, ``io.stat``; network from the pod's network
  namespace (``/proc/<pid>/net/dev``, loopback excluded; cgroups do not account it).
* Any other PID (a local workload shares its cgroup and network namespace with the rest of
  the machine) is accounted per process: ``/proc/<pid>/stat`` CPU time (its own and its
  waited-for children's), resident memory from ``statm``, ``/proc/<pid>/io`` bytes. Its
  network traffic cannot be told from the machine's and is left out rather than misattributed.
  Per-process totals drop when one of the processes ends (a counter reset for ``rate()``).

Counters are exposed as totals; rates for the bus are computed between two readings. A file
that is missing (a controller not enabled, a process that just exited, ``io`` of another
user's process) leaves that quantity ``None`` rather than failing the sample.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from alnair.v1 import metrics_pb2

from ._workloads import WorkloadInfo

CLOCK_TICKS = _CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_POD_LEVEL = re.compile(r"pod[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}")


@dataclass(frozen=True, slots=True)
class HostCounters:
    """Totals of one workload; ``None`` where the host does not provide the quantity."""

    cpu_seconds_total: float | None = None
    memory_bytes: int | None = None
    disk_read_bytes_total: int | None = None
    disk_write_bytes_total: int | None = None
    network_receive_bytes_total: int | None = None
    network_transmit_bytes_total: int | None = None
    cpu_user_seconds_total: float | None = None  # the user-mode part of cpu_seconds_total


@dataclass(frozen=True, slots=True)
class HostUsage:
    workload: WorkloadInfo
    at: float
    counters: HostCounters
    previous: HostCounters | None = None
    previous_at: float | None = None

    def _rate(self, name: str) -> float:
        if self.previous is None or self.previous_at is None or self.at <= self.previous_at:
            return 0.0
        now, before = getattr(self.counters, name), getattr(self.previous, name)
        if now is None or before is None or now < before:
            return 0.0
        return (now - before) / (self.at - self.previous_at)

    def to_proto(self) -> metrics_pb2.HostSample:
        return metrics_pb2.HostSample(
            workload=self.workload.to_proto(),
            cpu_cores=self._rate("cpu_seconds_total"),
            memory_bytes=self.counters.memory_bytes or 0,
            disk_read_bytes_per_second=self._rate("disk_read_bytes_total"),
            disk_write_bytes_per_second=self._rate("disk_write_bytes_total"),
            network_receive_bytes_per_second=self._rate("network_receive_bytes_total"),
            network_transmit_bytes_per_second=self._rate("network_transmit_bytes_total"),
        )


def _read(path: str) -> str | None:
    try:
        with open(path) as f:  # plain str paths: this runs for every pod every period
            return f.read()
    except OSError:
        return None


def _keyed(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return None


def _keyed_colon(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def _io_totals(text: str | None) -> tuple[int | None, int | None]:
    """Sum ``rbytes=``/``wbytes=`` over the devices of an ``io.stat``."""
    if text is None:
        return None, None
    read = write = 0
    for line in text.splitlines():
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if key == "rbytes":
                read += int(value)
            elif key == "wbytes":
                write += int(value)
    return read, write


def _net_totals(text: str | None) -> tuple[int | None, int | None]:
    """Receive/transmit bytes over the non-loopback interfaces of a ``net/dev``."""
    if text is None:
        return None, None
    rx = tx = 0
    for line in text.splitlines()[2:]:
        name, _, fields = line.partition(":")
        values = fields.split()
        if name.strip() == "lo" or len(values) < 9:
            continue
        rx += int(values[0])
        tx += int(values[8])
    return rx, tx


def _add(a: int | float | None, b: int | float | None) -> int | float | None:
    return b if a is None else a if b is None else a + b


class HostReader:
    """Reads cgroup v2 and /proc for the PIDs of each workload.

    A PID's pod cgroup and network namespace do not change while it lives, so both are
    looked up once per PID and kept until :meth:`keep_only` drops PIDs that are gone (a
    reused PID is a new entry because the old one was dropped when it disappeared).
    """

    def __init__(self, proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> None:
        self.proc = proc_root
        self.cgroup = cgroup_root
        self._proc = str(proc_root)
        self._where: dict[int, tuple[str | None, str | None]] = {}

    def cgroup_of(self, pid: int) -> Path | None:
        """The cgroup v2 directory of ``pid``'s pod; None for a process in no pod."""
        text = _read(f"{self._proc}/{pid}/cgroup")
        for line in (text or "").splitlines():
            if line.startswith("0::"):
                parts = [p for p in line[3:].strip().split("/") if p]
                for i, part in enumerate(parts):
                    if _POD_LEVEL.search(part):
                        return self.cgroup.joinpath(*parts[: i + 1])
        return None

    def _locate(self, pid: int) -> tuple[str | None, str | None]:
        where = self._where.get(pid)
        if where is None:
            cg = self.cgroup_of(pid)
            try:
                ns: str | None = os.readlink(f"{self._proc}/{pid}/ns/net")
            except OSError:
                ns = None  # exited, or not visible from here: nothing to count
            where = (None if cg is None else str(cg), ns)
            if cg is not None or ns is not None:
                self._where[pid] = where
        return where

    def keep_only(self, pids: set[int]) -> None:
        """Forget PIDs that are no longer anyone's (bounded memory, no stale PID reuse)."""
        for pid in [p for p in self._where if p not in pids]:
            del self._where[pid]

    def counters(self, pids: set[int]) -> HostCounters:
        """Totals over the distinct pod cgroups and network namespaces of ``pids``, plus the
        per-process totals of the PIDs in no pod."""
        cgroups: set[str] = set()
        netns: dict[str, int] = {}
        loose: list[int] = []
        for pid in pids:
            cg, ns = self._locate(pid)
            if cg is None:
                loose.append(pid)
                continue
            cgroups.add(cg)
            if ns is not None:
                netns.setdefault(ns, pid)
        cpu = user = mem = rd = wr = rx = tx = None
        for cg in sorted(cgroups):
            cpu_stat = _read(f"{cg}/cpu.stat")
            usec, user_usec = _keyed(cpu_stat, "usage_usec"), _keyed(cpu_stat, "user_usec")
            cpu = _add(cpu, None if usec is None else usec / 1e6)
            user = _add(user, None if user_usec is None else user_usec / 1e6)
            current = _read(f"{cg}/memory.current")
            mem = _add(mem, int(current) if current and current.strip().isdigit() else None)
            r, w = _io_totals(_read(f"{cg}/io.stat"))
            rd, wr = _add(rd, r), _add(wr, w)
        for pid in netns.values():
            r, t = _net_totals(_read(f"{self._proc}/{pid}/net/dev"))
            rx, tx = _add(rx, r), _add(tx, t)
        for pid in loose:
            c, u, m, r, w = self._process(pid)
            cpu, user, mem, rd, wr = _add(cpu, c), _add(user, u), _add(mem, m), _add(rd, r), _add(wr, w)
        return HostCounters(cpu, mem, rd, wr, rx, tx, user)  # type: ignore[arg-type]

    def _process(self, pid: int) -> tuple[float | None, float | None, int | None, int | None, int | None]:
        """CPU seconds and user-mode CPU seconds (own + waited-for children), resident bytes,
        read/written bytes of one process."""
        cpu = user = mem = None
        stat = _read(f"{self._proc}/{pid}/stat")
        if stat is not None:
            fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces
            if len(fields) > 14:  # utime stime cutime cstime
                cpu = sum(int(f) for f in fields[11:15]) / _CLOCK_TICKS
                user = (int(fields[11]) + int(fields[13])) / _CLOCK_TICKS
        statm = _read(f"{self._proc}/{pid}/statm")
        if statm is not None and len(statm.split()) > 1:
            mem = int(statm.split()[1]) * _PAGE_BYTES
        io = _read(f"{self._proc}/{pid}/io")
        return cpu, user, mem, _keyed_colon(io, "read_bytes"), _keyed_colon(io, "write_bytes")

    def usage_known(self, counters: HostCounters) -> bool:
        """False when none of the files existed (every PID gone or invisible)."""
        return any(v is not None for v in (counters.cpu_seconds_total, counters.memory_bytes,
                                           counters.disk_read_bytes_total, counters.network_receive_bytes_total))

