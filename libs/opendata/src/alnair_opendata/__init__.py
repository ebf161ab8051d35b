"""Alnair's open dataset: per-second series and per-run summaries of AI workloads on one GPU.

Public door: the schema (:data:`SERIES`, :data:`SUMMARY` and their units), the per-run
features computed from a series (:func:`features`, the recorder's own), the loaders over the
published data (:func:`load_runs`, :func:`load_series`), :func:`convert` (a recorder's output
directory into the published layout) and :class:`OpenDataError`, the root of this package's
errors. The schema and the features are plain Python; pyarrow is imported by the loaders and
``convert`` only, so the recorder can use the rest on a machine without it.
"""

from ._errors import DatasetNotFoundError, OpenDataError, RecordingError, SchemaMismatchError
from ._features import features, quantile, rate, statistics_of
from ._layout import DATA_ROOT, dataset_dir
from ._schema import (
    LABELS,
    RATES,
    SCALARS,
    SERIES,
    SERIES_NAMES,
    STATS,
    SUMMARY,
    SUMMARY_NAMES,
    Column,
    feature_columns,
)


def load_runs(dataset: str = "h200", root=None):  # type: ignore[no-untyped-def]
    """The summary table (``summary.csv``) of a published dataset, as a ``pyarrow.Table``."""
    from ._loader import load_runs as _load

    return _load(dataset, root)


def load_series(run_id: str, dataset: str = "h200", root=None):  # type: ignore[no-untyped-def]
    """One run's per-second series, as a ``pyarrow.Table`` ordered by ``t_s``."""
    from ._loader import load_series as _load

    return _load(run_id, dataset, root)


def convert(source, target):  # type: ignore[no-untyped-def]
    """A recorder's ``--out`` directory (or several) into the published layout; returns its summary."""
    from ._convert import convert as _convert

    return _convert(source, target)


__all__ = [
    "DATA_ROOT",
    "LABELS",
    "RATES",
    "SCALARS",
    "SERIES",
    "SERIES_NAMES",
    "STATS",
    "SUMMARY",
    "SUMMARY_NAMES",
    "Column",
    "DatasetNotFoundError",
    "OpenDataError",
    "RecordingError",
    "SchemaMismatchError",
    "convert",
    "dataset_dir",
    "feature_columns",
    "features",
    "load_runs",
    "load_series",
    "quantile",
    "rate",
    "statistics_of",
]
