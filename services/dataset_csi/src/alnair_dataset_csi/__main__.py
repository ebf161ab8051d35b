"""Entrypoint: ``alnair-dataset-csi`` or ``python -m alnair_dataset_csi``."""

from __future__ import annotations

import sys

from pydantic import ValidationError

from alnair_common import configure_logging

from ._server import serve
from ._settings import DatasetCsiSettings


def main() -> None:
    try:
        settings = DatasetCsiSettings()
    except ValidationError as e:
        sys.exit(f"alnair-dataset-csi: bad settings: {e}")
    configure_logging(settings.log_level, settings.log_format, service="dataset-csi",
                      node=settings.node_name)
    serve(settings)


if __name__ == "__main__":
    main()
