"""Entrypoint: ``alnair-dataset-csi`` or ``python -m alnair_dataset_csi``."""

from __future__ import annotations

import sys

from alnair_common import ConfigError, configure_logging, load_settings

from ._server import serve
from ._settings import DatasetCsiSettings


def main() -> None:
    try:
        settings = load_settings(DatasetCsiSettings)
    except ConfigError as e:
        print(f"alnair-dataset-csi: {e}", file=sys.stderr)
        raise SystemExit(2) from e
    configure_logging(settings.log_level, settings.log_format, service="dataset-csi",
                      node=settings.node_name)
    serve(settings)


if __name__ == "__main__":
    main()
