"""Alnair device plugin: ``alnair/vgpu-memory`` and ``alnair/vgpu-compute`` for the kubelet."""

from ._allocator import Allocator, ContainerGrant, ContainerPaths, MountSpec
from ._assignments import Assignment, AssignmentIndex, assignment_from_proto
from ._errors import DevicePluginError, InvalidDevicesError, NoAssignmentError
from ._service import DevicePluginService
from ._settings import DevicePluginSettings, open_source
from ._units import Resource, parse_units, unit_id
from ._workspace import Workspaces

__all__ = [
    "Allocator",
    "Assignment",
    "AssignmentIndex",
    "ContainerGrant",
    "ContainerPaths",
    "DevicePluginError",
    "DevicePluginService",
    "DevicePluginSettings",
    "InvalidDevicesError",
    "MountSpec",
    "NoAssignmentError",
    "Resource",
    "Workspaces",
    "assignment_from_proto",
    "open_source",
    "parse_units",
    "unit_id",
]
