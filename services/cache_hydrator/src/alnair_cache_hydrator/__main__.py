"""Entrypoint: ``alnair-cache-hydrator`` or ``python -m alnair_cache_hydrator``."""

from alnair_common import run_service

from ._service import CacheHydratorService


def main() -> None:
    run_service(CacheHydratorService)


if __name__ == "__main__":
    main()
