"""The scheduler's exception tree.

:class:`SchedulerError` is the root. :class:`InvalidRequestError` is permanent (the workload
asks for something no card can ever give, or names an unknown profile): it is reported once
and the workload is not retried. :class:`CardFullError` is what a compare-and-set commit
raises when another writer filled the card first: the placement is retried next cycle.
"""

from __future__ import annotations

from alnair_common import AlnairError, PermanentError, TemporaryError


class SchedulerError(AlnairError):
    """Root of the scheduler's own errors."""


class InvalidRequestError(SchedulerError, PermanentError):
    """The request can never be placed as written; ``code`` is machine-readable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class CardFullError(SchedulerError, TemporaryError):
    """A commit would take a card over its capacity (someone else committed first)."""

    def __init__(self, gpu_uuid: str, message: str) -> None:
        super().__init__(f"{gpu_uuid}: {message}", retry_after=0.0)
        self.gpu_uuid = gpu_uuid
