"""The device plugin service."""

from __future__ import annotations

from alnair_common import Service


class DevicePluginService(Service):
    name = "device-plugin"
    role = "skeleton: connected and healthy; serves no kubelet API yet (device plugin issue #5)"
