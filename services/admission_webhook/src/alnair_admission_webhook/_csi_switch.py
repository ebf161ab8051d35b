"""The transparent switch (issue #17): a seed-form pod's read-only hostPath volumes read
through the cache.

The seed's ``cacheDataset: "yes"`` makes each hostPath volume a data set, but unchanged code
opens files under the volume's mountPath, which shows the node's directory. The switch adds,
beside such a volume, a CSI ephemeral volume of Alnair's dataset driver
(``alnair_common.dataset_refs.CSI_DRIVER``, services/dataset_csi) that shows its data set, and
points the containers' mounts of the hostPath volume at it: mountPath and subPath stay, and
now show the data set through the cache, misses read from the source.

The hostPath volume itself stays in the pod, unmounted: so the pod needs exactly the
permission to use that host path it needed before (Pod Security admission judges the pod
as written), and kube-bridge, which asks the hydrator for a seed pod's data sets from its
hostPath volumes, sees the same volumes as before. Nothing the pod's author writes can make
the cache show a directory their pod could not mount itself.

Only a volume that every container mounting it mounts ``readOnly: true`` is switched: the
cache's view is read-only, so a container that may write to the node's directory would lose
that. A hostPath that is mounted writable, mounted by no container, or is not a directory
stays as it is, with a warning that says how to switch it. A pass over a switched pod finds
its cache volumes in place and changes nothing (a container added since that mounts the
hostPath read-only is pointed at the cache volume too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from alnair_common.dataset_refs import CSI_DATASET, CSI_DRIVER, host_path_name

MOUNTING_LISTS = ("initContainers", "containers")
DIRECTORY_TYPES = frozenset({"", "Directory"})
"""hostPath types the cache can stand in for: a directory that exists (DirectoryOrCreate
would make an empty one where the data set's source is missing)."""
_PREFIX = "alnair dataset cache: "


@dataclass
class VolumeSwitch:
    """The patch that switches a pod's volumes, what it switched, what it could not."""

    patch: list[dict[str, Any]] = field(default_factory=list)
    switched: dict[str, str] = field(default_factory=dict)  # hostPath volume → cache volume
    warnings: list[str] = field(default_factory=list)


def cache_volume_name(volume: str) -> str:
    """The cache volume beside hostPath volume ``volume`` (a DNS label, whatever its length)."""
    return "alnair-cache-" + hashlib.sha256(volume.encode()).hexdigest()[:12]


def csi_volume(name: str, path: str) -> dict[str, Any]:
    """The CSI ephemeral volume ``name`` that shows hostPath ``path``'s data set."""
    return {"name": name, "csi": {"driver": CSI_DRIVER, "readOnly": True,
                                  "volumeAttributes": {CSI_DATASET: host_path_name(path)}}}


def switch_volumes(spec: Mapping[str, Any]) -> VolumeSwitch:
    """The switch of a seed-form pod's hostPath volumes (see the module docstring)."""
    volumes = spec.get("volumes") or []
    present = {v.get("name", "") for v in volumes}
    mounts = list(_mounts(spec))
    out = VolumeSwitch()
    for volume in volumes:
        name = volume.get("name", "")
        host = volume.get("hostPath") or {}
        if not host.get("path"):
            continue
        cache = cache_volume_name(name)
        mine = [m for m in mounts if m[2].get("name") == name]
        writers = [m[0] for m in mine if m[2].get("readOnly") is not True]
        kind = host.get("type") or ""
        if kind not in DIRECTORY_TYPES:
            out.warnings.append(
                f"{_PREFIX}hostPath volume {name!r} stays on the node's {kind} {host['path']}, not "
                "the cache: only a directory (type Directory or unset) is switched")
            continue
        if writers:
            out.warnings.append(
                f"{_PREFIX}hostPath volume {name!r} stays on the node's directory, not the cache: "
                f"container {writers[0]!r} mounts it writable and may write to it; to switch it, "
                "mount it readOnly: true in every container")
            continue
        if not mine:
            if cache not in present:
                out.warnings.append(
                    f"{_PREFIX}hostPath volume {name!r} stays on the node's directory: no "
                    "container mounts it; to switch it to the cache, mount it readOnly: true")
            continue
        if cache not in present:
            out.patch.append({"op": "add", "path": "/spec/volumes/-",
                              "value": csi_volume(cache, host["path"])})
            present.add(cache)
        for _container, pointer, _mount in mine:
            out.patch.append({"op": "replace", "path": f"{pointer}/name", "value": cache})
        out.switched[name] = cache
    return out


def _mounts(spec: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(container, JSON pointer of the mount, the mount) of every volume mount, subPath too."""
    for list_name in MOUNTING_LISTS:
        for ci, container in enumerate(spec.get(list_name) or ()):
            for mi, mount in enumerate(container.get("volumeMounts") or ()):
                yield container.get("name", ""), f"/spec/{list_name}/{ci}/volumeMounts/{mi}", mount
