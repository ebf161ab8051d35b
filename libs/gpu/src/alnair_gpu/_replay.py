"""Replay real NVML recordings (``tests/data/gpu/h200/*.jsonl.gz``) as a :class:`GpuSampler`.

CI has no GPU, so the exporter, the profiler and the scheduler's utilisation inputs are
tested against data a real H200 produced under real PyTorch workloads, recorded by
``scripts/gpu/nvml_record.py``: a ``header`` line (inventory, workloads with their PIDs),
``sample`` lines every ~0.1 s and a ``truth`` trailer.

Replay follows NVML's semantics rather than the file's raw rows: a process's utilisation is
``None`` in a row when NVML had no *new* sample for it, and a live NVML reader keeps the last
value, so the replay holds the last value per (pid, GPU) too. Time is re-based: the frame
shown is the one at ``clock() - start`` into the recording (looping by default), and
``sampled_at`` is the current clock, so replayed samples look live to their consumers.
Tests pin a moment of the recording with ``position`` (seconds into it) instead.

For benchmarks the recording can be widened to N GPUs x M processes: GPU ``i`` repeats the
recorded GPU ``i mod recorded`` under a synthetic UUID (``<uuid>-r<i>``) and process slot
``k`` of it repeats recorded process ``k mod recorded`` under PID ``pid_base + i*M + k``.
"""

from __future__ import annotations

import bisect
import gzip
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ._samples import DeviceSample, GpuSnapshot, ProcessSample, SampleSourceError

__all__ = ["RecordedWorkload", "Recording", "ReplaySampler", "load_recording"]

_MHZ = 1e6
_KBPS = 1000.0


@dataclass(frozen=True, slots=True)
class RecordedWorkload:
    pid: int
    workload: str
    spec: str
    is_training: bool


@dataclass(frozen=True, slots=True)
class _Frame:
    t: float
    devices: tuple[DeviceSample, ...]
    processes: tuple[ProcessSample, ...]


@dataclass(frozen=True)
class Recording:
    """A decoded recording: frames with per-process values already held NVML-style."""

    scenario: str
    interval_s: float
    workloads: tuple[RecordedWorkload, ...]
    frames: tuple[_Frame, ...]

    @property
    def duration_s(self) -> float:
        """Time from the first to one period after the last frame (one loop of the replay)."""
        return self.frames[-1].t - self.frames[0].t + self.interval_s

    def frame_at(self, offset_s: float) -> _Frame:
        """The frame showing at ``offset_s`` seconds into the recording (clamped)."""
        start = self.frames[0].t
        i = bisect.bisect_right(self._times, start + offset_s) - 1
        return self.frames[max(0, min(i, len(self.frames) - 1))]

    @property
    def _times(self) -> list[float]:
        cached = self.__dict__.get("_times_cache")
        if cached is None:
            cached = [f.t for f in self.frames]
            object.__setattr__(self, "_times_cache", cached)
        return cached


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SampleSourceError(f"{path}:{n}: not JSON ({e.msg} at column {e.colno})") from e
                if not isinstance(row, dict) or "kind" not in row:
                    raise SampleSourceError(f"{path}:{n}: expected an object with a 'kind' field")
                yield n, row
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise SampleSourceError(f"cannot read NVML recording {path}: {e}") from e


def _ratio(pct: Any) -> float | None:
    return None if pct is None else float(pct) / 100.0


def _device(row: dict[str, Any], names: dict[str, str]) -> DeviceSample:
    uuid = str(row["uuid"])
    power = row.get("power_mw")
    clock = row.get("sm_clock_mhz")
    tx, rx = row.get("pcie_tx_kbps"), row.get("pcie_rx_kbps")
    return DeviceSample(
        index=int(row["index"]),
        uuid=uuid,
        name=names.get(uuid, "unknown"),
        utilization_ratio=_ratio(row.get("utilization_gpu_pct")),
        memory_bandwidth_ratio=_ratio(row.get("utilization_memory_pct")),
        memory_used_bytes=int(row["memory_used_bytes"]),
        memory_total_bytes=int(row["memory_total_bytes"]),
        power_watts=None if power is None else power / 1000.0,
        temperature_celsius=None if row.get("temperature_c") is None else float(row["temperature_c"]),
        sm_clock_hertz=None if clock is None else clock * _MHZ,
        ecc_errors_total=None if row.get("ecc_volatile_total") is None else int(row["ecc_volatile_total"]),
        pcie_tx_bytes_per_second=None if tx is None else tx * _KBPS,
        pcie_rx_bytes_per_second=None if rx is None else rx * _KBPS,
    )


def load_recording(path: str | Path) -> Recording:
    """Read a ``.jsonl`` or ``.jsonl.gz`` recording; a malformed one raises SampleSourceError."""
    path = Path(path)
    header: dict[str, Any] | None = None
    frames: list[_Frame] = []
    held: dict[tuple[int, str], ProcessSample] = {}
    names: dict[str, str] = {}
    for n, row in _lines(path):
        try:
            if row["kind"] == "header":
                header = row
                names = {g["uuid"]: g.get("name", "unknown") for g in row["inventory"]["gpus"]}
            elif row["kind"] == "sample":
                if header is None:
                    raise SampleSourceError(f"{path}:{n}: a sample before the header line")
                devices = tuple(_device(g, names) for g in row["gpus"])
                procs = []
                for p in row["processes"]:
                    key = (int(p["pid"]), str(p["uuid"]))
                    last = held.get(key)
                    sm, mem = _ratio(p.get("sm_util_pct")), _ratio(p.get("mem_util_pct"))
                    used = p.get("used_memory_bytes")
                    sample = ProcessSample(
                        pid=key[0], gpu_uuid=key[1],
                        sm_utilization_ratio=sm if sm is not None else (last and last.sm_utilization_ratio),
                        memory_bandwidth_ratio=mem if mem is not None else (last and last.memory_bandwidth_ratio),
                        memory_used_bytes=int(used) if used is not None else (last and last.memory_used_bytes),
                    )
                    held[key] = sample
                    procs.append(sample)
                frames.append(_Frame(float(row["t"]), devices, tuple(procs)))
        except (KeyError, TypeError, ValueError) as e:
            raise SampleSourceError(f"{path}:{n}: malformed {row.get('kind')} line: {type(e).__name__}: {e}") from e
    if header is None or not frames:
        raise SampleSourceError(f"{path}: no header or no sample lines; re-record it with scripts/gpu/nvml_record.py")
    workloads = tuple(
        RecordedWorkload(int(w["pid"]), str(w["workload"]), str(w.get("spec", "")), bool(w.get("is_training")))
        for w in header.get("workloads", [])
    )
    return Recording(str(header.get("scenario", path.stem)), float(header.get("interval_s", 0.1)),
                     workloads, tuple(frames))


class ReplaySampler:
    """A :class:`GpuSampler` over a recording, optionally widened to N GPUs x M processes."""

    def __init__(
        self,
        recording: Recording,
        *,
        clock: Callable[[], float] = time.time,
        loop: bool = True,
        gpus: int | None = None,
        processes_per_gpu: int | None = None,
        pid_base: int = 100_000,
        position: Callable[[], float] | None = None,
    ) -> None:
        if gpus is not None and gpus < 1:
            raise SampleSourceError(f"replay needs at least 1 GPU, got gpus={gpus}")
        if processes_per_gpu is not None and processes_per_gpu < 0:
            raise SampleSourceError(f"processes_per_gpu must be >= 0, got {processes_per_gpu}")
        self.recording = recording
        self._clock = clock
        self._loop = loop
        self._start = clock()
        self._gpus = gpus
        self._per_gpu = processes_per_gpu
        self._pid_base = pid_base
        self._position = position

    def pid_of(self, gpu: int, slot: int) -> int:
        """The synthetic PID of process ``slot`` on widened GPU ``gpu``."""
        return self._pid_base + gpu * (self._per_gpu or 0) + slot

    def sample(self) -> GpuSnapshot:
        now = self._clock()
        offset = self._position() if self._position is not None else now - self._start
        if self._loop:
            offset %= self.recording.duration_s
        frame = self.recording.frame_at(offset)
        if self._gpus is None and self._per_gpu is None:
            return GpuSnapshot(now, frame.devices, frame.processes, simulated=True)
        return self._widen(now, frame)

    def _widen(self, now: float, frame: _Frame) -> GpuSnapshot:
        count = self._gpus or len(frame.devices)
        devices, processes = [], []
        for i in range(count):
            src = frame.devices[i % len(frame.devices)]
            uuid = f"{src.uuid}-r{i}"
            devices.append(replace(src, index=i, uuid=uuid))
            recorded = [p for p in frame.processes if p.gpu_uuid == src.uuid]
            if self._per_gpu is None:
                processes += [replace(p, gpu_uuid=uuid) for p in recorded]
            elif recorded:
                processes += [replace(recorded[k % len(recorded)], pid=self.pid_of(i, k), gpu_uuid=uuid)
                              for k in range(self._per_gpu)]
        return GpuSnapshot(now, tuple(devices), tuple(processes), simulated=True)

    def close(self) -> None:
        """Nothing to release; present for the GpuSampler interface."""
