"""One sampling period: measure, attribute to workloads, keep finished ones for the grace period.

Attribution order for a GPU process: the CUDA regions first (the interceptor lists each
workload's PIDs, in both modes), then the :class:`PidResolver` (cgroup → pod; the local
agent's reaper records). A process neither knows stays on the device series and on the bus
with an empty workload, never on a pod's series.

Host usage (cgroup and /proc files, the dearest part with many pods) is read every
``host_period_seconds``; between readings the last one stands. It is read for every
workload the directory knows and no event said finished, GPU or not: besides the PIDs the
GPU and the regions name, :class:`WorkloadPids` adds each workload's own processes (the
local agent's process tree, the pod's cgroup), so a CPU-only workload has host series and a
GPU workload's CPU-only helpers (data loaders) count too.

Bounded cardinality: a workload is *live* while it has a GPU process or a live process in its
region and no event said it finished. Its series stay, frozen at their last values, for
``grace_seconds`` after it stopped being live, then disappear (and a finished workload is
forgotten by the directory too); its region, if left on disk, is not read again until it
changes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from alnair_gpu import GpuSampler, GpuSnapshot

from ._allocations import PodAllocations
from ._cuda import CudaUsage, RegionReading
from ._host import HostReader, HostUsage
from ._identity import PidResolver
from ._region_scanner import RegionScanner
from ._view import AttributedProcess, NodeView, PodGpuUsage, WorkloadSeries
from ._workload_pids import WorkloadPids
from ._workloads import WorkloadDirectory, WorkloadInfo


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class NodeSampler:
    """Produces a :class:`NodeView` per call of :meth:`sample`. Not thread-safe: one caller."""

    def __init__(
        self,
        node: str,
        *,
        gpu: GpuSampler | None,
        scanner: RegionScanner,
        directory: WorkloadDirectory,
        resolver: PidResolver | None = None,
        host: HostReader | None = None,
        workload_pids: WorkloadPids | None = None,
        grace_seconds: float = 60.0,
        host_period_seconds: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.gpu = gpu
        self.scanner = scanner
        self.directory = directory
        self.resolver = resolver
        self.host = host
        self.workload_pids = workload_pids
        self._own_pids: dict[str, set[int]] = {}  # uid → its own processes, as of the last host reading
        self.grace = grace_seconds
        self.host_period = host_period_seconds
        self._next_host = 0.0
        self.clock = clock
        self._kept: dict[str, WorkloadSeries] = {}
        self._last_live: dict[str, float] = {}
        self._hosts: dict[str, HostUsage] = {}
        self.allocations = PodAllocations()  # replaced whole by the PodResources poller
        self._resolved: dict[int, str] = {}
        self._expired: set[str] = set()  # ended workloads whose exited regions are still on disk

    def sample(self) -> NodeView:
        now = self.clock()
        snap = self.gpu.sample() if self.gpu is not None else GpuSnapshot(now, (), ())
        readings = self.scanner.scan()
        owner_of: dict[int, WorkloadInfo] = {}
        for r in readings:
            for pid in r.pids():
                owner_of[pid] = r.workload
        processes = tuple(AttributedProcess(p, self._owner(p.pid, owner_of)) for p in snap.processes)
        live_pids = {p.pid for p in snap.processes}
        for pid in [p for p in self._resolved if p not in live_pids]:
            del self._resolved[pid]

        current: dict[str, WorkloadSeries] = {}
        pids: dict[str, set[int]] = defaultdict(set)
        for uid, gpus in self._pod_usage(snap, processes).items():
            current[uid] = WorkloadSeries(gpus[0].workload, gpus=tuple(gpus))
        for p in processes:
            if p.workload is not None:
                pids[p.workload.uid].add(p.sample.pid)
        fresh_cuda: list[CudaUsage] = []
        for r in readings:
            uid = r.workload.uid
            cuda = tuple(r.usage(self._gpu_uuid_of(r, snap, self.allocations)))
            fresh_cuda += cuda
            live = bool(r.region.active()) or uid in current
            base = current.get(uid, WorkloadSeries(r.workload, live=live))
            current[uid] = WorkloadSeries(r.workload, base.gpus, cuda, live=live)
            pids[uid] |= r.pids()
        if self.host is not None:
            due = now >= self._next_host
            if due:
                self._next_host = now + self.host_period
                if self.workload_pids is not None:
                    self._own_pids = self.workload_pids.pids(w.uid for w in self.directory.unfinished())
            for uid, own in self._own_pids.items():
                pids[uid] |= own
                if uid not in current and (info := self.directory.get(uid)) is not None:
                    current[uid] = WorkloadSeries(info)  # no GPU process: host series only
            for uid, series in list(current.items()):
                if due:
                    host = self._host_usage(series.workload, pids[uid], now) if pids[uid] else None
                else:
                    host = self._hosts.get(uid)  # between host periods the last reading stands
                if host is not None:  # (a constructor call: dataclasses.replace is 5x dearer, x512)
                    current[uid] = WorkloadSeries(series.workload, series.gpus, series.cuda, host, series.live)
            if due:
                self.host.keep_only(set().union(*pids.values()) if pids else set())
        return NodeView(self.node, snap.sampled_at, snap.simulated, snap.devices, processes,
                        self._retain(now, current, readings), tuple(fresh_cuda), self.allocations)

    def _owner(self, pid: int, owner_of: dict[int, WorkloadInfo]) -> WorkloadInfo | None:
        if pid in owner_of:
            return owner_of[pid]
        # A live PID keeps its owner (asked again once it is gone); "nobody's" is asked again
        # every period, as the agent may record a workload's reaper just after its start.
        uid = self._resolved.get(pid)
        if uid is None and self.resolver is not None:
            uid = self.resolver.workload_uid(pid)
            if uid is not None:
                self._resolved[pid] = uid
        if uid is None:
            return None
        return self.directory.get(uid) or WorkloadInfo.unnamed(uid)

    @staticmethod
    def _pod_usage(snap: GpuSnapshot, processes: tuple[AttributedProcess, ...]) -> dict[str, list[PodGpuUsage]]:
        index = {d.uuid: d.index for d in snap.devices}
        groups: dict[tuple[str, str], list[AttributedProcess]] = defaultdict(list)
        for p in processes:
            if p.workload is not None:
                groups[(p.workload.uid, p.sample.gpu_uuid)].append(p)
        out: dict[str, list[PodGpuUsage]] = defaultdict(list)
        for (uid, gpu_uuid), members in groups.items():
            out[uid].append(PodGpuUsage(
                workload=members[0].workload,  # type: ignore[arg-type]
                gpu_uuid=gpu_uuid, gpu_index=index.get(gpu_uuid, -1),
                sm_utilization_ratio=_sum([m.sample.sm_utilization_ratio for m in members]),
                memory_bandwidth_ratio=_sum([m.sample.memory_bandwidth_ratio for m in members]),
                memory_used_bytes=sum(m.sample.memory_used_bytes or 0 for m in members),
                processes=len(members),
            ))
        return out

    @staticmethod
    def _gpu_uuid_of(reading: RegionReading, snap: GpuSnapshot, allocations: PodAllocations
                     ) -> Callable[[int], str]:
        """CUDA ordinal → UUID: the assigned or only allocated card (the workload sees only
        it), else by index."""
        by_index = {d.index: d.uuid for d in snap.devices}
        w = reading.workload
        cards = allocations.cards_of(w.namespace, w.name)
        assigned = w.gpu_uuid or (cards[0] if len(cards) == 1 else "")

        def of(ordinal: int) -> str:
            if assigned and ordinal == 0:
                return assigned
            return by_index.get(ordinal, "")

        return of

    def _host_usage(self, workload: WorkloadInfo, pids: set[int], now: float) -> HostUsage | None:
        assert self.host is not None
        counters = self.host.counters(pids)
        if not self.host.usage_known(counters):
            return None
        before = self._hosts.get(workload.uid)
        usage = HostUsage(workload, now, counters,
                          before.counters if before else None, before.at if before else None)
        self._hosts[workload.uid] = usage
        return usage

    def _sleep_regions(self, uid: str, readings: list[RegionReading]) -> None:
        """An expired workload's regions are not read again until they change."""
        for r in readings:
            if r.workload.uid == uid:
                self.scanner.set_dormant(r.path)

    def _retain(self, now: float, current: dict[str, WorkloadSeries],
                readings: list[RegionReading]) -> tuple[WorkloadSeries, ...]:
        for uid in [u for u in self._expired if u not in current]:
            self._expired.discard(uid)  # its region is gone too: nothing left to hide
        for uid, series in current.items():
            finished = self.directory.finished_at(uid)
            live = series.live and finished is None
            if live:
                self._expired.discard(uid)
                self._last_live[uid] = now
            elif uid in self._expired:
                self._sleep_regions(uid, readings)
                continue  # ended and shown for its grace period already: stays gone
            else:
                self._last_live.setdefault(uid, now if finished is None else min(finished, now))
                series = replace(series, live=False)
            self._kept[uid] = series
        for uid in list(self._kept):
            finished = self.directory.finished_at(uid)
            if finished is not None and self._last_live.get(uid, now) > finished:
                self._last_live[uid] = finished
            if uid not in current and self._kept[uid].live:
                self._kept[uid] = replace(self._kept[uid], live=False)
            if now - self._last_live.get(uid, now) > self.grace:
                self._expired.add(uid)
                del self._kept[uid]
                self._last_live.pop(uid, None)
                self._hosts.pop(uid, None)
                if finished is not None:
                    self.directory.forget(uid)
        self.directory.sweep(now, self.grace + 1.0)
        return tuple(self._kept.values())

