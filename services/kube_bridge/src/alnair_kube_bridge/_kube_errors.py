"""Kubernetes API failures, sorted into permanent (report and stop) and temporary (retry)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

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


def api_call(what: str, call: Callable[[], Any], *, absent: Collection[int] = ()) -> Any:
    """``call()``; None when the API answers one of the ``absent`` statuses; else its failure
    classified (permanent: refused for good; temporary: retried by the caller's lane)."""
    try:
        return call()
    except ApiException as e:
        if e.status in absent:
            return None
        raise classify(e, what) from e
    except Exception as e:  # noqa: BLE001 - connection errors become temporary
        error = classify(e, what)
        if error is e:
            raise
        raise error from e


def response_json(response: Any) -> dict[str, Any]:
    """The body of a call made with ``_preload_content=False``, its connection released."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def api_json(what: str, call: Callable[[], Any], *, absent: Collection[int] = ()) -> dict[str, Any] | None:
    """:func:`api_call` of a ``_preload_content=False`` call, its body parsed."""
    response = api_call(what, call, absent=absent)
    return None if response is None else response_json(response)
