"""The hydrator's errors: one root; a bad request is permanent, a tier away is temporary.

Errors of hydration itself (the source, the budget) are not raised out of the service: they
become the data set's FAILED status with the reason code alnair_dataset gives them.
"""

from __future__ import annotations

from alnair_common import AlnairError, PermanentError, TemporaryError


class CacheHydratorError(AlnairError):
    """Root of the cache hydrator's errors."""


class InvalidRequestError(CacheHydratorError, PermanentError):
    """A request that cannot be carried out as it stands; the message says why."""


class TierBusyError(CacheHydratorError, TemporaryError):
    """The tier could not be reached to carry out a request; it is retried."""
