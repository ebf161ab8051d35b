"""What the open-dataset recorder reads each second, as rows of ``alnair_opendata.SERIES``.

* the exporter's ``/metrics`` (parsed by ``e2e_report.parse_exposition``): per-workload
  series by ``pod_name`` (the ``alnair run --name``), device series by card;
* ``/proc`` of the workload's process tree (the pid its ``--pid-file`` names, and every
  descendant: DataLoader workers): CPU time, RSS, read/write bytes, processes, threads;
* the workload's ``--truth-file``: how many iterations had finished by then.

Standard library only (it runs on the GPU machine through ``repo_env.sh``).
"""

from __future__ import annotations

import bisect
import csv
import gzip
import os
from pathlib import Path
from typing import Any

from e2e_report import parse_exposition

POD = {
    "alnair_gpu_util": ("gpu_util_ratio", 0.01),
    "alnair_gpu_mem_util": ("gpu_mem_util_ratio", 0.01),
    "alnair_pod_gpu_memory_used_bytes": ("gpu_memory_bytes", 1.0),
    "alnair_cuda_memory_used_bytes": ("cuda_memory_used_bytes", 1.0),
    "alnair_cuda_memory_limit_bytes": ("cuda_memory_limit_bytes", 1.0),
    "alnair_cuda_compute_limit_ratio": ("cuda_compute_limit_ratio", 1.0),
    "alnair_cuda_available_tokens": ("cuda_available_tokens", 1.0),
    "alnair_cuda_sm_utilization_ratio": ("cuda_sm_utilization_ratio", 1.0),
    "alnair_cuda_launch_period_seconds": ("cuda_launch_period_seconds", 1.0),
    "alnair_cuda_processes": ("cuda_processes", 1.0),
    "alnair_cuda_kernel_launches_total": ("kernel_launches_total", 1.0),
    "alnair_cuda_throttled_seconds_total": ("throttled_seconds_total", 1.0),
    "alnair_pod_network_receive_bytes_total": ("pod_network_receive_bytes_total", 1.0),
    "alnair_pod_network_transmit_bytes_total": ("pod_network_transmit_bytes_total", 1.0),
}
DEVICE = {
    "alnair_gpu_utilization_ratio": "device_util_ratio",
    "alnair_gpu_memory_bandwidth_utilization_ratio": "device_memory_bandwidth_ratio",
    "alnair_gpu_memory_used_bytes": "device_memory_used_bytes",
    "alnair_gpu_power_watts": "power_watts",
    "alnair_gpu_temperature_celsius": "temperature_celsius",
    "alnair_gpu_sm_clock_hertz": "sm_clock_hertz",
    "alnair_gpu_pcie_transmit_bytes_per_second": "pcie_tx_bytes_per_second",
    "alnair_gpu_pcie_receive_bytes_per_second": "pcie_rx_bytes_per_second",
}
_CLK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def read_scrape(text: str) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per workload (summed over cards; copies split by direction) and device (summed over cards
    for power and PCIe, else the first card's value: the recorder uses one GPU)."""
    pods: dict[str, dict[str, float]] = {}
    device: dict[str, float] = {}
    for name, labels, value in parse_exposition(text):
        if name == "alnair_cuda_memcpy_bytes_total" and "pod_name" in labels:
            key = f"memcpy_{labels.get('direction', 'unknown')}_bytes_total"
            row = pods.setdefault(labels["pod_name"], {})
            row[key] = row.get(key, 0.0) + value
        elif name in POD and "pod_name" in labels:
            key, factor = POD[name]
            row = pods.setdefault(labels["pod_name"], {})
            row[key] = row.get(key, 0.0) + value * factor
        elif name in DEVICE and DEVICE[name] not in device:
            device[DEVICE[name]] = value
    return pods, device


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def tree_usage(root: int) -> dict[str, float] | None:
    """CPU seconds (reaped children included), RSS, rchar/wchar, processes and threads of the
    tree under ``root``; None once ``root`` is gone."""
    seen, todo = set(), [root]
    total = {"cpu_seconds_total": 0.0, "rss_bytes": 0.0, "io_read_bytes_total": 0.0, "io_write_bytes_total": 0.0,
             "processes": 0.0, "threads": 0.0}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            if pid == root:
                return None
            continue
        # fields[0] is field 3 (state): utime 14, stime 15, cutime 16, cstime 17, threads 20, rss 24
        ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        total["cpu_seconds_total"] += ticks / _CLK
        total["threads"] += int(fields[17])
        total["rss_bytes"] += int(fields[21]) * _PAGE
        total["processes"] += 1
        try:
            with open(f"/proc/{pid}/io") as f:
                io = dict(line.split(": ") for line in f.read().splitlines())
            total["io_read_bytes_total"] += int(io["rchar"])
            total["io_write_bytes_total"] += int(io["wchar"])
        except (OSError, KeyError, ValueError):
            pass
        todo += _children(pid)
    return total


class TruthCounter:
    """Iterations finished by a given moment, from the workload's truth file (read as it grows)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.times = path, 0, []  # type: ignore[var-annotated]

    def count_at(self, when: float) -> float:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return 0.0
        end = data.rfind(b"\n") + 1
        self.offset += end
        self.times += [float(x) for x in data[:end].split()]
        self.times.sort()
        return float(bisect.bisect_right(self.times, when))


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def write_series(path: Path, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    """gzip CSV, header first, empty cell for a value not seen; written whole then renamed."""
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if r.get(c) is None else repr(float(r[c])) for c in columns])
    tmp.replace(path)


def read_series(path: Path) -> list[dict[str, float | None]]:
    with gzip.open(path, "rt", newline="") as f:
        return [{k: (float(v) if v != "" else None) for k, v in r.items()} for r in csv.DictReader(f)]
