"""The exception tree of alnair_common.

Every error raised by this package derives from :class:`AlnairError`. Errors that a retry
may cure derive from :class:`TemporaryError` and carry ``retry_after`` seconds; the others are
permanent. Workers map the two onto JetStream ``nak(delay)`` and ``term()``.
"""

from __future__ import annotations


class AlnairError(Exception):
    """Root of every error raised by Alnair's shared library."""


class PermanentError(AlnairError):
    """Retrying cannot help: the input is wrong or the request is impossible.

    ``obj``: the object concerned (``namespace/name``, or a uid) where the raiser knows it; a
    durable consumer that terminates the message puts it in the ErrorEvent's ``object``, so
    whoever relays the refusal can tell which object it is about."""

    obj: str = ""

    def __init__(self, *args: object, obj: str = "") -> None:
        super().__init__(*args)
        if obj:
            self.obj = obj


class TemporaryError(AlnairError):
    """A retry after ``retry_after`` seconds may succeed (a server is away, a race was lost)."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConfigError(PermanentError):
    """A setting is missing or invalid; the message names the setting and the fix."""


class DecodeError(PermanentError):
    """A bus payload is not the protobuf message its subject carries."""

    def __init__(self, subject: str, message_type: str, reason: str, size: int) -> None:
        super().__init__(
            f"cannot decode {size}-byte payload on {subject!r} as {message_type}: {reason}"
        )
        self.subject = subject
        self.message_type = message_type


class UnknownSubjectError(PermanentError):
    """A subject that no entry of the subject table matches."""


class PermissionDeniedError(PermanentError):
    """This bus identity may not publish or read a subject (the server would refuse it too)."""


class BusUnavailableError(TemporaryError):
    """The NATS server cannot be reached or a request got no answer in time."""


class RevisionConflictError(TemporaryError):
    """A compare-and-set update lost a race: another writer changed the key first."""

    def __init__(self, bucket: str, key: str, expected: int | None) -> None:
        super().__init__(
            f"key {key!r} in bucket {bucket!r} changed since revision {expected}; "
            "re-read and retry",
            retry_after=0.0,
        )
        self.bucket = bucket
        self.key = key
        self.expected = expected
