"""Finds and decodes the interceptor regions under the workspaces directory, every period.

A region that is truncated, of an unknown layout version, foreign, or that names no known
workload is skipped with one log line per file and reason and counted once in
``alnair_exporter_regions_skipped_total{reason}``.

Workspaces outlive their workloads (the local agent keeps them for ``alnair logs``), so a
long-lived node accumulates regions nobody writes any more. Such a region goes *dormant*: a
bad one, one of an unknown workload, or one whose workload's series have expired is not read
again until its file changes (inode, size or modification time) — or, for an unknown
workload, until a workload event may have named it. A period then costs one ``stat`` per
dormant region instead of two 270 KB reads and decodes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alnair_common import get_logger
from alnair_common.cuda_region import FILE_NAME, RegionBusyError, RegionFormatError, read_region

from ._cuda import RegionReading
from ._workloads import WorkloadDirectory

log = get_logger("alnair.exporter.cuda")

FileKey = tuple[int, int, int]


@dataclass(frozen=True)
class _Dormant:
    file: FileKey
    directory_version: int | None  # wake when the directory changed (unknown workloads only)


def _file_key(path: Path) -> FileKey | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class RegionScanner:
    def __init__(self, workspaces: Path, directory: WorkloadDirectory,
                 on_skip: Callable[[str], None] = lambda reason: None) -> None:
        self.workspaces = workspaces
        self.directory = directory
        self._on_skip = on_skip
        self._logged: dict[Path, str] = {}
        self._dormant: dict[Path, _Dormant] = {}
        self.reads = 0  # regions decoded so far (what dormancy saves is visible in tests)

    def scan(self) -> list[RegionReading]:
        try:
            paths = sorted(self.workspaces.glob(f"*/{FILE_NAME}"))
        except OSError as e:
            self._skip(self.workspaces, "unreadable", f"cannot list workspaces: {e}")
            return []
        present = set(paths)
        for gone in [p for p in (*self._logged, *self._dormant) if p not in present]:
            self._logged.pop(gone, None)
            self._dormant.pop(gone, None)
        readings = []
        for path in paths:
            if self._still_dormant(path):
                continue
            reading = self._read(path)
            if reading is not None:
                readings.append(reading)
                self._logged.pop(path, None)
        return readings

    def set_dormant(self, path: Path) -> None:
        """Stop reading ``path`` until it changes (its workload's series have expired)."""
        key = _file_key(path)
        if key is not None:
            self._dormant[path] = _Dormant(key, None)

    def _still_dormant(self, path: Path) -> bool:
        dormant = self._dormant.get(path)
        if dormant is None:
            return False
        changed = _file_key(path) != dormant.file or (
            dormant.directory_version is not None and dormant.directory_version != self.directory.version)
        if changed:
            del self._dormant[path]
        return not changed

    def _read(self, path: Path) -> RegionReading | None:
        key = _file_key(path)  # before reading: a write during the read wakes it next period
        version = self.directory.version
        if key is not None and key[1] == 0:
            # Created empty by the device plugin at Allocate; the interceptor lays it out at
            # the pod's first CUDA call. Not malformed: wait for it to change.
            self._dormant[path] = _Dormant(key, None)
            return None
        self.reads += 1
        try:
            region = read_region(path)
        except RegionFormatError as e:
            reason = "unknown_version" if "version" in str(e) else "malformed"
            return self._skip(path, reason, str(e), key, None)
        except RegionBusyError as e:
            return self._skip(path, "busy", str(e))
        except OSError as e:
            return self._skip(path, "unreadable", f"{path}: {e}")
        workload = self.directory.resolve(path.parent.name, region.header.workload_id)
        if workload is None:
            return self._skip(path, "unknown_workload",
                              f"{path}: region of workload {region.header.workload_id!r} in workspace "
                              f"{path.parent.name!r}, and no workload event names either", key, version)
        return RegionReading(workload, region, path)

    def _skip(self, path: Path, reason: str, detail: str, key: FileKey | None = None,
              version: int | None = None) -> None:
        self._on_skip(reason)
        if key is not None:
            self._dormant[path] = _Dormant(key, version)
        if self._logged.get(path) != reason:
            self._logged[path] = reason
            log.warning("cuda region skipped", path=str(path), reason=reason, detail=detail)
        return None
