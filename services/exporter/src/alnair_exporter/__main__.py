"""Entrypoint: ``alnair-exporter`` or ``python -m alnair_exporter``."""

from alnair_common import run_service

from ._service import ExporterService


def main() -> None:
    run_service(ExporterService)


if __name__ == "__main__":
    main()
