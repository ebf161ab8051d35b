"""Alnair device plugin."""

from ._service import DevicePluginService

__all__ = ["DevicePluginService"]
