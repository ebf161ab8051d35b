"""The exceptions of alnair_dataset: one root, each with a stable ``reason`` code.

The reason codes are the ones ``CacheDatasetStatus.reason`` carries, so the hydrator turns
an error into a status without a translation table. ``temporary`` says whether trying
again later can help (a tier that is restarting) or not (a bucket that does not exist).
"""

from __future__ import annotations


class DatasetError(Exception):
    """Root of every error this package raises."""

    reason = "error"
    temporary = False


class TierUnavailableError(DatasetError):
    """The cache tier cannot be reached; readers fall back to the source."""

    reason = "tier-unavailable"
    temporary = True


class TierPermissionError(TierUnavailableError):
    """The tier's user may not do this (a read-only reader's write, another namespace's data
    set); readers read from the source instead, and stop writing back."""

    reason = "tier-permission-denied"
    temporary = False


class CapacityError(DatasetError):
    """The tier's byte budget cannot hold what a data set needs."""

    reason = "insufficient-capacity"


class InvalidSpecError(DatasetError):
    """A data set's name, source URI or patterns are not acceptable."""

    reason = "invalid-spec"


class SourceError(DatasetError):
    """Reading the source failed."""

    reason = "source-error"


class SourceUnreachableError(SourceError):
    reason = "source-unreachable"
    temporary = True


class NoSuchBucketError(SourceError):
    reason = "no-such-bucket"


class AccessDeniedError(SourceError):
    reason = "access-denied"


class PathNotAllowedError(SourceError):
    reason = "path-not-allowed"


class SourceChangedError(SourceError):
    """A file changed (or vanished) between listing and reading: its bytes are not cached."""

    reason = "source-changed"
