"""Entrypoint: ``alnair-scheduler`` or ``python -m alnair_scheduler``."""

from alnair_common import run_service

from ._service import SchedulerService


def main() -> None:
    run_service(SchedulerService)


if __name__ == "__main__":
    main()
