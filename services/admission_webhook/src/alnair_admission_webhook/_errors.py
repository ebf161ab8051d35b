"""The webhook's one exception root, and which failures are worth retrying.

* :class:`ReviewError` (permanent): a request body that is not an AdmissionReview v1; it is
  answered 400 with the reason, and the API server applies the failurePolicy.
* :class:`CertificateError` (temporary): the TLS Secret or the webhook configuration could
  not be read or written (API server away, RBAC missing, a race lost too often); the start
  fails with the reason and the Deployment restarts the container.
"""

from __future__ import annotations

from alnair_common import AlnairError, PermanentError, TemporaryError


class AdmissionWebhookError(AlnairError):
    """Everything this service raises on purpose."""


class ReviewError(AdmissionWebhookError, PermanentError):
    """The request body is not an AdmissionReview v1 this webhook can answer."""


class CertificateError(AdmissionWebhookError, TemporaryError):
    """The TLS Secret or the webhook configuration cannot be read, written or used."""

    def __init__(self, message: str, retry_after: float = 5.0) -> None:
        super().__init__(message, retry_after)
