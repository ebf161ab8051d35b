"""``alnair profile NAME``: show the profile the profiler recorded for a workload or owner.

Reads the same store the profiler writes (MongoDB when ``--mongo-url``/``ALNAIR_MONGO_URL``
is given, else the local platform's embedded store under the data directory), so it works
while the platform is down and shows what was recorded, not what is running.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table

from alnair_common import PermanentError
from alnair_profiler import SERIES, ProfilerSettings, ProfileStore, open_store

UNITS = {"cpu_cores": ("cores", 1.0), "memory_bytes": ("GiB", 2**30), "disk_io_bytes_per_second": ("MB/s", 1e6),
         "network_bytes_per_second": ("MB/s", 1e6), "gpu_utilization_ratio": ("%", 0.01),
         "gpu_memory_bytes": ("GiB", 2**30), "memcpy_bytes_per_second": ("GB/s", 1e9),
         "memcpy_htod_bytes_per_second": ("GB/s", 1e9), "memcpy_dtoh_bytes_per_second": ("GB/s", 1e9),
         "memcpy_dtod_bytes_per_second": ("GB/s", 1e9)}


class ProfileNotFoundError(PermanentError, LookupError):
    """No recorded profile (or no store) answers to the name; a lookup failure, so also a
    LookupError."""


def store_for(data_dir: Path, mongo_url: str | None, database: str, collection: str) -> ProfileStore:
    embedded = ProfilerSettings.model_construct(data_dir=data_dir).embedded_dir
    if not mongo_url and not embedded.exists():
        raise ProfileNotFoundError(
            f"no profiles yet: the embedded store {embedded} does not exist (run a workload under "
            "`alnair up`, or pass --mongo-url to read a MongoDB)")
    return open_store(mongo_url=mongo_url, database=database, collection=collection, embedded_dir=embedded)


def lookup(store: ProfileStore, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Workload records named ``name`` (newest first) and owner records named ``name``."""
    workloads, owners = store.profiles_named(name), store.owners_named(name)
    if not workloads and not owners:
        raise ProfileNotFoundError(f"no profile named {name!r} in {store.description} "
                                   "(profiles are written when a workload finishes)")
    return workloads, owners


def _fmt(name: str, value: float) -> str:
    unit, scale = UNITS.get(name, ("", 1.0))
    return f"{value / scale:.3g} {unit}".strip()


def workload_view(doc: dict[str, Any]) -> Group:
    t = doc.get("training") or {}
    head = Table.grid(padding=(0, 2))
    head.add_row("workload", f"{doc.get('namespace', '')}/{doc.get('name', '')} ({doc.get('uid')})")
    head.add_row("phase", f"{doc.get('phase', '')} on {doc.get('node') or '?'}, "
                          f"{_when(doc.get('started_at'))} → {_when(doc.get('finished_at'))}")
    owners = ", ".join(f"{o['kind']}/{o['name']}" for o in doc.get("owners", [])) or "none"
    head.add_row("owners", owners)
    kind = "training" if t.get("is_training") else "not training"
    period = f", iteration {t['period_seconds'] * 1e3:.1f} ms" if t.get("period_seconds") else ""
    head.add_row("job type", f"{kind}{period} (confidence {t.get('confidence', 0):.2f}, "
                             f"{t.get('evidence') or 'no evidence'})")
    if t.get("reason"):
        head.add_row("", str(t["reason"]))
    head.add_row("predicted peak GPU memory", _fmt("gpu_memory_bytes", doc.get("predicted_peak_gpu_memory_bytes", 0)))
    if u := doc.get("usage"):
        cpu, peak = u["cpu_user_seconds"] + u["cpu_system_seconds"], _fmt("memory_bytes", u["max_rss_bytes"])
        head.add_row("used in all", f"CPU {cpu:.2f} s (user {u['cpu_user_seconds']:.2f} s), peak memory of "
                                    f"one process {peak}, disk {u['disk_read_bytes'] / 1e6:.3g} MB read, "
                                    f"{u['disk_write_bytes'] / 1e6:.3g} MB written")
    table = Table("series", "max", "p10", "p50", "p90", "samples", title="usage")
    for name in SERIES:
        s = (doc.get("series") or {}).get(name) or {}
        d = s.get("deciles") or []
        table.add_row(name, _fmt(name, s.get("max", 0.0)), *(_fmt(name, d[i]) if d else "-" for i in (0, 4, 8)),
                      str(s.get("samples", 0)))
    return Group(head, table)


def owner_view(doc: dict[str, Any]) -> Table:
    table = Table("series", "max over workloads",
                  title=f"{doc.get('kind')}/{doc.get('name')}: {doc.get('workload_count', 0)} workloads profiled")
    for name in SERIES:
        table.add_row(name, _fmt(name, (doc.get("maxima") or {}).get(name, 0.0)))
    return table


def to_json(workloads: list[dict[str, Any]], owners: list[dict[str, Any]]) -> str:
    return json.dumps({"workloads": workloads, "owners": owners}, indent=2, default=_json_default)


def _json_default(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _when(value: object) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else "?"
