"""Entrypoint: ``alnair-admission-webhook`` or ``python -m alnair_admission_webhook``."""

from alnair_common import run_service

from ._service import AdmissionWebhookService


def main() -> None:
    run_service(AdmissionWebhookService)


if __name__ == "__main__":
    main()
