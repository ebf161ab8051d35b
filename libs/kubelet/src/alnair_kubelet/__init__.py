"""alnair_kubelet: what node services need from the kubelet.

The device plugin API v1beta1 and the PodResources v1 API (our wire-compatible copies, in
:mod:`alnair_kubelet.api`), a PodResources client, and the PID → container/pod helper. The
test kubelet lives in :mod:`alnair_kubelet.testing`. Errors derive from :class:`KubeletError`.
"""

from . import api
from ._errors import KubeletError, KubeletUnavailableError, UnsupportedCgroupError
from ._identity import ContainerIdentity, identify_cgroup, identify_pid, unified_path
from ._podresources import DEFAULT_SOCKET, ContainerDevices, PodResourcesClient, PodResourcesSnapshot

__all__ = [
    "DEFAULT_SOCKET",
    "ContainerDevices",
    "ContainerIdentity",
    "KubeletError",
    "KubeletUnavailableError",
    "PodResourcesClient",
    "PodResourcesSnapshot",
    "UnsupportedCgroupError",
    "api",
    "identify_cgroup",
    "identify_pid",
    "unified_path",
]
