"""The running state of one workload: its series, launch reports, copy counters and the
latest kernel-name totals per GPU.

It can be written out whole (:meth:`WorkloadState.to_doc`) and read back, which is how a
profiler restarted in the middle of a workload continues where it stopped instead of
profiling only the second half.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._detection import KernelNameReport, LaunchReport, detect
from ._domain import COPY_DIRECTIONS, CopyCounter, LaunchPoint, Point, WorkloadInfo
from ._peak_memory import predict_peak
from ._profile import SERIES, WorkloadProfile, with_exit_usage
from ._series import Series

MAX_LAUNCH_REPORTS = 2_000


@dataclass
class WorkloadState:
    uid: str
    info: WorkloadInfo | None = None
    series: dict[str, Series] = field(default_factory=dict)
    launches: list[LaunchReport] = field(default_factory=list)
    last_copy: dict[str, tuple[float, int]] = field(default_factory=dict)  # direction → (t, bytes)
    kernel_names: dict[str, KernelNameReport] = field(default_factory=dict)  # gpu uuid → latest totals
    first_seen: float = 0.0
    dirty: bool = False

    def add(self, item: Point | LaunchPoint | CopyCounter | KernelNameReport) -> None:
        self.dirty = True
        if isinstance(item, KernelNameReport):
            # totals: the newest reading per GPU is all there is to keep
            known = self.kernel_names.get(item.gpu_uuid)
            if known is None or item.t >= known.t:
                self.kernel_names[item.gpu_uuid] = item
        elif isinstance(item, Point):
            self.series.setdefault(item.metric, Series()).add(item.t, item.value)
        elif isinstance(item, LaunchPoint):
            self.launches.append(LaunchReport(item.t, item.period_seconds, item.repeats))
            if len(self.launches) > MAX_LAUNCH_REPORTS:
                self.launches = self.launches[::2]
        else:
            self._add_copy(item)

    def _add_copy(self, c: CopyCounter) -> None:
        """A rate per direction and their sum, from consecutive cumulative readings. A
        direction whose counter went backwards (a new process) skips one reading."""
        rates: list[float] = []
        for direction, total in c.by_direction().items():
            previous = self.last_copy.get(direction)
            self.last_copy[direction] = (c.t, total)
            if previous is None or c.t <= previous[0] or total < previous[1]:
                continue  # first reading, out of order, or the counter restarted
            rate = (total - previous[1]) / (c.t - previous[0])
            self.series.setdefault(f"memcpy_{direction}_bytes_per_second", Series()).add(c.t, rate)
            rates.append(rate)
        if len(rates) == len(COPY_DIRECTIONS):
            self.series.setdefault("memcpy_bytes_per_second", Series()).add(c.t, sum(rates))

    def profile(self, info: WorkloadInfo) -> WorkloadProfile:
        gpu_mem = self.series.get("gpu_memory_bytes") or self.series.get("gpu_memory_bytes_cuda") or Series()
        util = self.series.get("gpu_utilization_ratio") or Series()
        ut, uv = util.ordered()
        mt, mv = gpu_mem.ordered()
        summaries = {name: (gpu_mem if name == "gpu_memory_bytes" else self.series.get(name, Series())).summary()
                     for name in SERIES}
        peak = predict_peak(mt, mv, ut, uv)
        return WorkloadProfile(
            info=info, summaries=with_exit_usage(summaries, info),
            training=detect(sorted(self.launches, key=lambda r: r.t), ut, uv,
                            kernel_names=list(self.kernel_names.values())),
            predicted_peak_gpu_memory_bytes=peak.predicted_bytes if peak else 0)

    def to_doc(self) -> dict[str, object]:
        return {
            "_id": self.uid, "uid": self.uid,
            "info": self.info.to_doc() if self.info else None,
            "series": {k: s.to_doc() for k, s in self.series.items()},
            "launches": [[r.t, r.period_seconds, r.repeats] for r in self.launches],
            "last_copy": {k: list(v) for k, v in self.last_copy.items()},
            "kernel_names": [[r.gpu_uuid, r.t, r.kernel_launches, r.training_launches, r.names_read, r.torch_seen]
                             for r in self.kernel_names.values()],
            "first_seen": self.first_seen,
        }

    @classmethod
    def from_doc(cls, d: dict) -> WorkloadState:  # type: ignore[type-arg]
        last = d.get("last_copy")
        # A checkpoint from before copies were kept by direction holds one [t, sum]: dropped
        # (the next reading of each direction starts its rate again).
        last_copy = {k: (float(v[0]), int(v[1])) for k, v in last.items()} if isinstance(last, dict) else {}
        return cls(
            uid=d["uid"], info=WorkloadInfo.from_doc(d["info"]) if d.get("info") else None,
            series={k: Series.from_doc(v) for k, v in (d.get("series") or {}).items()},
            launches=[LaunchReport(float(t), float(p), int(r)) for t, p, r in d.get("launches", [])],
            last_copy=last_copy,
            # a checkpoint from before kernel names were kept has none: the next sample brings them
            kernel_names={str(g): KernelNameReport(d["uid"], float(t), str(g), int(n), int(k), bool(r), bool(p))
                          for g, t, n, k, r, p in d.get("kernel_names") or []},
            first_seen=float(d.get("first_seen", 0.0)))
