"""Entrypoint: ``alnair-kube-bridge`` or ``python -m alnair_kube_bridge``."""

from alnair_common import run_service

from ._service import KubeBridgeService


def main() -> None:
    run_service(KubeBridgeService)


if __name__ == "__main__":
    main()
