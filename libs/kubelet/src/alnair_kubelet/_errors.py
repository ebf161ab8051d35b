"""The exception tree of alnair_kubelet.

Everything raised here derives from :class:`KubeletError`. :class:`KubeletUnavailableError`
means "try again" (the kubelet restarts, its socket is not there yet); the others mean the
input or the host is not what this code supports, and say what would be.
"""

from __future__ import annotations


class KubeletError(Exception):
    """Root of every error raised by alnair_kubelet."""


class KubeletUnavailableError(KubeletError):
    """The kubelet's socket is missing or did not answer in time; retry after ``retry_after`` s."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UnsupportedCgroupError(KubeletError):
    """The host uses cgroup v1 only; workload identity needs the unified (v2) hierarchy."""
