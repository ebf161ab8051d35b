"""Kubernetes API failures, sorted into permanent (report and stop) and temporary (retry)."""

from __future__ import annotations

import json

import urllib3.exceptions
from kubernetes.client.rest import ApiException

from alnair_common import PermanentError, TemporaryError

# Conflict and throttling clear up; a server error or timeout may too.
MERGE_PATCH = "application/merge-patch+json"
_TEMPORARY_STATUS = frozenset({409, 429, 500, 502, 503, 504})


class KubeApiError(PermanentError):
    """The API refused a request for good (not found, invalid, forbidden)."""

    def __init__(self, reason: str, status: int | None) -> None:
        super().__init__(reason)
        self.status = status


def api_reason(e: ApiException) -> str:
    """``"NotFound: pods \\"x\\" not found"`` from the Status body, else the HTTP reason."""
    try:
        body = json.loads(e.body or "{}")
        return f"{body.get('reason') or e.reason}: {body.get('message') or ''}".strip(": ")
    except (TypeError, ValueError):
        return f"{e.status} {e.reason}"


def classify(e: Exception, what: str) -> Exception:
    """The Alnair error for a failed API call ``what`` (``"bind pod ns/x"``)."""
    if isinstance(e, ApiException):
        reason = api_reason(e)
        if e.status in _TEMPORARY_STATUS:
            return TemporaryError(f"{what}: HTTP {e.status} {reason}", retry_after=1.0)
        return KubeApiError(f"{what}: {reason}", e.status)
    if isinstance(e, urllib3.exceptions.HTTPError | OSError):
        return TemporaryError(f"{what}: Kubernetes API unreachable: {e!r}", retry_after=2.0)
    return e
