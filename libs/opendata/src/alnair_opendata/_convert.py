"""A recorder's output into the published layout (``_layout``): summary.csv, series.parquet.

The recorder (``scripts/gpu/opendata_record.py``) writes ``runs.jsonl`` (one summary row per
run), ``series/<run_id>.csv.gz`` and ``meta.json`` into its ``--out``; a grid recorded in
parts is several such directories, converted together (a run found in two of them with the
same row, as after ``--resume`` into a copy of the first, is taken once). Runs are ordered by id; the series of
all runs go into one Parquet file (zstd, ``run_id`` dictionary-encoded, units in each
field's metadata), which is far smaller than one file per run.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ._errors import RecordingError
from ._schema import LABELS, SERIES, SERIES_NAMES, SUMMARY, SUMMARY_NAMES, as_doc

PARQUET = {"compression": "zstd", "compression_level": 9, "use_dictionary": ["run_id"]}


def _cell(value: Any, dtype: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if dtype == "int64":
        return str(int(value))
    if dtype == "float64":
        return repr(float(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _read_rows(source: Path) -> list[dict[str, Any]]:
    path = source / "runs.jsonl"
    if not path.is_file():
        raise RecordingError(f"{source}: no runs.jsonl: give the directory opendata_record.py wrote (--out)")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise RecordingError(f"{path}:{n}: not JSON ({e}); a line cut short by a kill can be deleted") from e
        missing = [c.name for c in LABELS if c.name not in row]
        if missing:
            raise RecordingError(f"{path}:{n}: run {row.get('run_id')!r} lacks {missing}: recorded by another "
                                 "version of the recorder")
        rows.append(row)
    return rows


def _series(source: Path, run_id: str) -> list[list[float | None]]:
    path = source / "series" / f"{run_id}.csv.gz"
    if not path.is_file():
        raise RecordingError(f"{path}: missing (runs.jsonl names run {run_id!r})")
    with gzip.open(path, "rt", newline="") as f:
        reader = csv.reader(f)
        header = tuple(next(reader, ()))
        if header != SERIES_NAMES:
            raise RecordingError(f"{path}: columns {header[:4]}... are not the schema's series columns")
        return [[float(v) if v != "" else None for v in r] for r in reader]


def convert(sources: Path | str | list[Path | str], target: Path | str) -> dict[str, Any]:
    dirs = [Path(s) for s in (sources if isinstance(sources, list) else [sources])]
    out = Path(target)
    rows: dict[str, tuple[dict[str, Any], Path]] = {}
    for d in dirs:
        for row in _read_rows(d):
            if row["run_id"] in rows:
                if rows[row["run_id"]][0] == row:
                    continue  # a later part's directory that also holds the earlier one's runs (--resume)
                raise RecordingError(f"run {row['run_id']!r} is in both {rows[row['run_id']][1]} and {d}, "
                                     "recorded twice with different results: convert one of them")
            rows[row["run_id"]] = (row, d)
    if not rows:
        raise RecordingError(f"no runs in {', '.join(map(str, dirs))}")
    out.mkdir(parents=True, exist_ok=True)
    ids = sorted(rows)
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_NAMES)
        for run_id in ids:
            w.writerow([_cell(rows[run_id][0].get(c.name), c.dtype) for c in SUMMARY])
    columns: dict[str, list[Any]] = {"run_id": [], **{c: [] for c in SERIES_NAMES}}
    for run_id in ids:
        for values in _series(rows[run_id][1], run_id):
            columns["run_id"].append(run_id)
            for name, v in zip(SERIES_NAMES, values, strict=True):
                columns[name].append(v)
    fields = [pa.field("run_id", pa.string(), metadata={"unit": "-"})]
    # Units in each field's metadata; names, units and docs of everything in schema.json beside it.
    fields += [pa.field(c.name, pa.float64(), metadata={"unit": c.unit}) for c in SERIES]
    schema = pa.schema(fields, metadata={"dataset": "alnair open dataset", "schema": "schema.json"})
    pq.write_table(pa.table(columns, schema=schema), out / "series.parquet", **PARQUET)
    (out / "schema.json").write_text(json.dumps(as_doc(), indent=1) + "\n")
    metas = []
    for d in dirs:
        try:
            metas.append(json.loads((d / "meta.json").read_text()))
        except (OSError, ValueError):
            metas.append({"missing": f"{d}/meta.json"})
    keep = ("environment", "platform", "startup_s", "grid_part", "sim", "elapsed_s", "notes", "options", "teardown",
            "previous")
    meta = {"runs": len(ids), "sources": [str(d) for d in dirs],
            "recordings": [{k: m.get(k) for k in keep} for m in metas]}
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    summary = {"runs": len(ids), "samples": len(columns["run_id"]), "summary_columns": len(SUMMARY),
               "bytes": sum(p.stat().st_size for p in out.iterdir() if p.is_file())}
    return summary
