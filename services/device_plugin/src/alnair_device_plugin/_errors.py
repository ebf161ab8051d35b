"""Why an allocation is refused. Each maps to one gRPC status the kubelet sees.

:class:`DevicePluginError` is the root (an :class:`alnair_common.AlnairError`).
:class:`InvalidDevicesError` (INVALID_ARGUMENT) is permanent: the request itself is wrong —
unknown device IDs, units of two cards in one container, more than 100 % of a card.
:class:`NoAssignmentError` (FAILED_PRECONDITION) is temporary: the request is well-formed but
no scheduler decision on the bus matches it yet, so handing out a GPU would be a guess; the
plugin waits for the decision a while before it answers with this.
"""

from __future__ import annotations

from alnair_common import AlnairError, PermanentError, TemporaryError


class DevicePluginError(AlnairError):
    """Root of the device plugin's own errors."""


class InvalidDevicesError(DevicePluginError, PermanentError):
    """The kubelet asked for device IDs this plugin cannot grant as asked."""


class NoAssignmentError(DevicePluginError, TemporaryError):
    """No (or no unambiguous) scheduler assignment matches the requested units."""
