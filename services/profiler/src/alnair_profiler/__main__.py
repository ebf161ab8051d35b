"""Entrypoint: ``alnair-profiler`` or ``python -m alnair_profiler``."""

from alnair_common import run_service

from ._service import ProfilerService


def main() -> None:
    run_service(ProfilerService)


if __name__ == "__main__":
    main()
