"""Entrypoint: ``alnair-local-agent`` or ``python -m alnair_local_agent``."""

from alnair_common import run_service

from ._service import LocalAgentService


def main() -> None:
    run_service(LocalAgentService)


if __name__ == "__main__":
    main()
