"""Which cached data sets a pod reads, from its annotations: one parser for every adapter.

Two spellings (annotations.py):

* Alnair's own, ``ai.centaurus.io/dataset: "imagenet,coco"``: data sets of the pod's
  namespace, by name (a Dataset custom resource, or one added on the bus).
* The seed's, ``cacheDataset: "yes"``: every hostPath volume of the pod is a data set whose
  source is ``file://<hostPath>``; its name is derived from the path (:func:`host_path_name`)
  so that every pod naming the same directory shares one data set.

Names are held to what the hydrator accepts and Kubernetes object names allow at once: a
DNS-1123 label (lower-case letters, digits and '-', 1 to 63 characters, starting and ending
with a letter or digit).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .annotations import DATASET, SEED_CACHE_DATASET

# The CSI driver that mounts a data set of the pod's namespace read-only into the pod (a CSI
# ephemeral volume: ``csi: {driver: CSI_DRIVER, readOnly: true, volumeAttributes:
# {CSI_DATASET: <name>}}``), served through the cache by services/dataset_csi on each node.
CSI_DRIVER = "datasets.alnair.centaurus.io"
CSI_DATASET = "dataset"

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# What a data set's (or its namespace's) name may be anywhere on the bus: it becomes a subject
# token, a key of the status bucket and part of the tier's keys. Pods' annotations are held to
# the stricter _LABEL (check_name), which also fits Kubernetes object names.
_ON_THE_BUS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_SEED_YES = {"yes", "true", "1"}


class DatasetRefError(ValueError):
    """An annotation names data sets in a way Alnair cannot use; the text says how to fix it."""


@dataclass(frozen=True)
class DatasetRef:
    """One data set a pod reads. ``source`` is set for the seed's hostPath form (the data set
    is created from it if missing) and empty for a data set named by the Alnair annotation.
    ``volume`` is the pod volume the seed form came from."""

    name: str
    source: str = ""
    volume: str = ""


def check_name(name: str) -> str:
    if not _LABEL.match(name):
        raise DatasetRefError(
            f"data set name {name!r} is not valid: use 1 to 63 lower-case letters, digits or "
            "'-', starting and ending with a letter or digit")
    return name


def bus_name_problem(what: str, value: str) -> str | None:
    """Why ``value`` cannot be a data set's (or namespace's, ``what``) name on the bus; None
    when it can. The cache hydrator refuses such a request, and the CLI asks nothing."""
    if _ON_THE_BUS.match(value):
        return None
    return (f"{what} {value!r} is not valid: 1 to 63 letters, digits, '-' or '_', starting with "
            "a letter or digit")


def host_path_name(path: str) -> str:
    """The data set name of the seed's hostPath source ``path``: readable and unique."""
    normal = "/" + path.strip("/")
    leaf = re.sub(r"[^a-z0-9-]+", "-", normal.rsplit("/", 1)[-1].lower()).strip("-")[:40]
    digest = hashlib.sha256(normal.encode()).hexdigest()[:10]
    return f"hostpath-{leaf}-{digest}" if leaf else f"hostpath-{digest}"


def pod_datasets(annotations: Mapping[str, str],
                 host_paths: Iterable[tuple[str, str]] = ()) -> list[DatasetRef]:
    """The data sets a pod with ``annotations`` reads, in order, each once.

    ``host_paths``: (volume name, hostPath) of the pod's hostPath volumes, used by the seed
    form. Raises :class:`DatasetRefError` for a malformed annotation (a bad name, an empty
    list, the seed form on a pod without hostPath volumes).
    """
    refs: dict[str, DatasetRef] = {}
    raw = annotations.get(DATASET)
    if raw is not None:
        names = [part.strip() for part in raw.split(",")]
        if not any(names):
            raise DatasetRefError(
                f"annotation {DATASET} is empty: name one or more data sets, e.g. "
                f'{DATASET}: "imagenet,coco"')
        for name in names:
            if not name:
                raise DatasetRefError(f"annotation {DATASET}={raw!r} has an empty name "
                                      "between commas")
            refs.setdefault(check_name(name), DatasetRef(name))
    seed = annotations.get(SEED_CACHE_DATASET)
    if seed is not None and seed.strip().lower() in _SEED_YES:
        paths = list(host_paths)
        if not paths:
            raise DatasetRefError(
                f'annotation {SEED_CACHE_DATASET}: "{seed}" caches the pod\'s hostPath volumes, '
                f"but the pod has none; name the data sets with {DATASET} instead")
        for volume, path in paths:
            if not path.startswith("/"):
                raise DatasetRefError(f"hostPath volume {volume!r}: path {path!r} is not "
                                      "absolute")
            name = host_path_name(path)
            refs.setdefault(name, DatasetRef(name, "file:///" + path.strip("/"), volume))
    return list(refs.values())


def pod_host_paths(pod_spec: Mapping) -> list[tuple[str, str]]:
    """(volume name, path) of the hostPath volumes of a pod spec given as a dict (the
    Kubernetes JSON form, as admission reviews and watches deliver it)."""
    out = []
    for volume in pod_spec.get("volumes") or ():
        host = volume.get("hostPath")
        if host and host.get("path"):
            out.append((volume.get("name", ""), host["path"]))
    return out
