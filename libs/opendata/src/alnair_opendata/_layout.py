"""Where the published datasets live: ``data/open-dataset/<name>/`` in the repository.

``<name>/summary.csv`` (one row per run, ``SUMMARY`` columns), ``<name>/series.parquet``
(every run's per-second series, ``run_id`` + ``SERIES`` columns, zstd), ``<name>/schema.json``
(names, types, units) and ``<name>/meta.json`` (how it was recorded). ``h200`` is the GPU
recording; ``sim`` is the ``--sim`` dry run the tests use, never GPU data.
``$ALNAIR_OPEN_DATASET`` points elsewhere (an installed package has no repository).
"""

from __future__ import annotations

import os
from pathlib import Path

from ._errors import DatasetNotFoundError

DATA_ROOT = Path(__file__).resolve().parents[4] / "data" / "open-dataset"


def dataset_dir(dataset: str = "h200", root: Path | str | None = None) -> Path:
    base = Path(root) if root is not None else Path(os.environ.get("ALNAIR_OPEN_DATASET") or DATA_ROOT)
    path = base / dataset
    if not (path / "summary.csv").is_file():
        known = sorted(p.name for p in base.iterdir() if (p / "summary.csv").is_file()) if base.is_dir() else []
        raise DatasetNotFoundError(
            f"no dataset {dataset!r} under {base} (no {path / 'summary.csv'}); published here: "
            f"{', '.join(known) or 'none'} (set $ALNAIR_OPEN_DATASET or root= to look elsewhere)")
    return path
