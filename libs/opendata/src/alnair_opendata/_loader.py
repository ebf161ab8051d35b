"""Reading a published dataset: the summary as one table, a run's series as another."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ._errors import DatasetNotFoundError, SchemaMismatchError
from ._layout import dataset_dir
from ._schema import SERIES_NAMES, SUMMARY, SUMMARY_NAMES

ARROW = {"float64": pa.float64(), "int64": pa.int64(), "string": pa.string(), "bool": pa.bool_()}


def load_runs(dataset: str = "h200", root: Path | str | None = None) -> pa.Table:
    path = dataset_dir(dataset, root) / "summary.csv"
    with open(path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
    if tuple(header) != SUMMARY_NAMES:
        missing = [c for c in SUMMARY_NAMES if c not in header]
        extra = [c for c in header if c not in SUMMARY_NAMES]
        raise SchemaMismatchError(f"{path}: columns are not this version's schema (missing {missing[:8]}, "
                                  f"unknown {extra[:8]}): re-run `alnair-opendata convert` on the recording")
    types = {c.name: ARROW[c.dtype] for c in SUMMARY}
    strings = [c.name for c in SUMMARY if c.dtype == "string"]
    options = pacsv.ConvertOptions(column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False,
                                   null_values=[""], true_values=["true"], false_values=["false"])
    table = pacsv.read_csv(path, convert_options=options)
    # A label recorded as '' stays '' (an alone run's co-runner), not null.
    for name in strings:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.fill_null(table[name], ""))
    return table


def load_series(run_id: str, dataset: str = "h200", root: Path | str | None = None) -> pa.Table:
    path = dataset_dir(dataset, root) / "series.parquet"
    table = pq.read_table(path, filters=[("run_id", "=", run_id)])
    if table.num_rows == 0:
        raise DatasetNotFoundError(f"no series of run {run_id!r} in {path}: the run ids are "
                                   "load_runs()['run_id']")
    names = tuple(table.column_names)
    if names != ("run_id", *SERIES_NAMES):
        raise SchemaMismatchError(f"{path}: series columns are not this version's schema: "
                                  f"{sorted(set(SERIES_NAMES) ^ set(names) - {'run_id'})}")
    return table.sort_by("t_s")
