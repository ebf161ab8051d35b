"""The transparent switch (issue #17): a seed-form pod's read-only hostPath volumes read
through the cache.

The seed's ``cacheDataset: "yes"`` makes each hostPath volume a data set, but unchanged code
opens files under the volume's mountPath, which shows the node's directory. The switch
replaces such a volume, under the same name, with a CSI ephemeral volume of Alnair's dataset
driver (``alnair_common.dataset_refs.CSI_DRIVER``, services/dataset_csi): the containers'
volumeMounts (mountPath, subPath) are not touched and now show the data set through the
cache, misses read from the source.

Only a volume that every container mounting it mounts ``readOnly: true`` is switched: the
cache's view is read-only, so a container that may write to the node's directory would lose
that. A hostPath that is mounted writable, mounted by no container, or is not a directory
stays as it is, with a warning that says how to switch it.

A switched volume is recorded (volume name → hostPath) in the webhook's marker: a re-admitted
pod has no hostPath for it any more, and :func:`seed_host_paths` reads its source back from
there, so the pod names the same data sets, in the same order, on every pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alnair_common.dataset_refs import CSI_DATASET, CSI_DRIVER, host_path_name

MOUNTING_LISTS = ("initContainers", "containers", "ephemeralContainers")
DIRECTORY_TYPES = frozenset({"", "Directory"})
"""hostPath types the cache can stand in for: a directory that exists (DirectoryOrCreate
would make an empty one where the data set's source is missing)."""
_PREFIX = "alnair dataset cache: "


@dataclass
class VolumeSwitch:
    """The patch that switches a pod's volumes, what it switched, what it could not."""

    patch: list[dict[str, Any]] = field(default_factory=list)
    switched: dict[str, str] = field(default_factory=dict)  # volume name → hostPath
    warnings: list[str] = field(default_factory=list)


def csi_volume(name: str, path: str) -> dict[str, Any]:
    """The CSI ephemeral volume that shows hostPath ``path``'s data set under volume ``name``."""
    return {"name": name, "csi": {"driver": CSI_DRIVER, "readOnly": True,
                                  "volumeAttributes": {CSI_DATASET: host_path_name(path)}}}


def seed_host_paths(spec: Mapping[str, Any], switched: Mapping[str, str]) -> list[tuple[str, str]]:
    """(volume name, hostPath) of the pod's seed volumes in volume order: its hostPath volumes
    and the ones an earlier pass switched (``switched``, from the marker), as long as the CSI
    volume still names that path's data set (an edited one counts as the user's own)."""
    out = []
    for volume in spec.get("volumes") or ():
        name = volume.get("name", "")
        host = volume.get("hostPath")
        if host and host.get("path"):
            out.append((name, host["path"]))
        elif name in switched and _is_switched(volume, switched[name]):
            out.append((name, switched[name]))
    return out


def switch_volumes(spec: Mapping[str, Any], switched: Mapping[str, str]) -> VolumeSwitch:
    """The switch of a seed-form pod's hostPath volumes; ``switched``: what earlier passes
    switched (a container added since that mounts one writable is warned about: its writes
    fail on the cache's read-only view)."""
    mounts = _mounts_by_volume(spec)
    out = VolumeSwitch()
    for index, volume in enumerate(spec.get("volumes") or ()):
        name = volume.get("name", "")
        host = volume.get("hostPath") or {}
        writers = [c for c, read_only in mounts.get(name, ()) if not read_only]
        if name in switched and _is_switched(volume, switched[name]):
            out.warnings += [
                f"{_PREFIX}container {c!r} mounts volume {name!r} writable, but the volume shows "
                "a data set through the cache, read-only: its writes fail; mount it readOnly: true"
                for c in writers]
            continue
        if not host.get("path"):
            continue
        kind = host.get("type") or ""
        if kind not in DIRECTORY_TYPES:
            out.warnings.append(
                f"{_PREFIX}hostPath volume {name!r} stays on the node's {kind} {host['path']}, not "
                "the cache: only a directory (type Directory or unset) is switched")
        elif writers:
            out.warnings.append(
                f"{_PREFIX}hostPath volume {name!r} stays on the node's directory, not the cache: "
                f"container {writers[0]!r} mounts it writable and may write to it; to switch it, "
                "mount it readOnly: true in every container")
        elif name not in mounts:
            out.warnings.append(
                f"{_PREFIX}hostPath volume {name!r} stays on the node's directory: no container "
                "mounts it; to switch it to the cache, mount it readOnly: true")
        else:
            out.patch.append({"op": "replace", "path": f"/spec/volumes/{index}",
                              "value": csi_volume(name, host["path"])})
            out.switched[name] = host["path"]
    return out


def _is_switched(volume: Mapping[str, Any], path: str) -> bool:
    csi = volume.get("csi") or {}
    return (csi.get("driver") == CSI_DRIVER
            and (csi.get("volumeAttributes") or {}).get(CSI_DATASET) == host_path_name(path))


def _mounts_by_volume(spec: Mapping[str, Any]) -> dict[str, list[tuple[str, bool]]]:
    """Volume name → (container, mounted readOnly: true) of every mount of it, subPath ones too."""
    out: dict[str, list[tuple[str, bool]]] = {}
    for container in _containers(spec):
        for mount in container.get("volumeMounts") or ():
            out.setdefault(mount.get("name", ""), []).append(
                (container.get("name", ""), mount.get("readOnly") is True))
    return out


def _containers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for list_name in MOUNTING_LISTS:
        yield from spec.get(list_name) or ()
