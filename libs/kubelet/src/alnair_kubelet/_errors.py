"""The exception tree of alnair_kubelet.

Everything raised here derives from :class:`KubeletError`, itself an
:class:`alnair_common.AlnairError`. :class:`KubeletUnavailableError` is a
:class:`~alnair_common.TemporaryError` — "try again after ``retry_after`` s" (the kubelet
restarts, its socket is not there yet); :class:`UnsupportedCgroupError` is a
:class:`~alnair_common.PermanentError`: the host is not what this code supports, and the
message says what would be. A bare :class:`KubeletError` (an unreadable ``/proc`` entry, an
unexpected gRPC status) is neither by class.
"""

from __future__ import annotations

from alnair_common import AlnairError, PermanentError, TemporaryError


class KubeletError(AlnairError):
    """Root of every error raised by alnair_kubelet."""


class KubeletUnavailableError(KubeletError, TemporaryError):
    """The kubelet's socket is missing or did not answer in time; retry after ``retry_after`` s."""


class UnsupportedCgroupError(KubeletError, PermanentError):
    """The host uses cgroup v1 only; workload identity needs the unified (v2) hierarchy."""
