"""Entrypoint: ``alnair-elastic-job`` or ``python -m alnair_elastic_job``."""

from alnair_common import run_service

from ._service import ElasticJobService


def main() -> None:
    run_service(ElasticJobService)


if __name__ == "__main__":
    main()
