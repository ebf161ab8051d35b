"""Why an allocation is refused. Each maps to one gRPC status the kubelet sees.

:class:`InvalidDevicesError` (INVALID_ARGUMENT): the request itself is wrong — unknown device
IDs, units of two cards in one container, more than 100 % of a card. :class:`NoAssignmentError`
(FAILED_PRECONDITION): the request is well-formed but no scheduler decision on the bus matches
it, so handing out a GPU would be a guess.
"""

from __future__ import annotations


class DevicePluginError(Exception):
    """Root of the device plugin's own errors."""


class InvalidDevicesError(DevicePluginError):
    """The kubelet asked for device IDs this plugin cannot grant as asked."""


class NoAssignmentError(DevicePluginError):
    """No (or no unambiguous) scheduler assignment matches the requested units."""
