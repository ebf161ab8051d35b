"""What the webhook changes in a pod: a pure function of the pod and what the bus knows.

The contract (README.md of this service has the user's view):

* a pod with neither ``ai.centaurus.io/dataset`` nor ``cacheDataset`` is not touched (no
  patch at all, so the stored pod is byte-identical to what was sent);
* every container and init container gets the data client's environment (:mod:`._pod_env`)
  for the data sets the annotations name (alnair_common.dataset_refs parses both forms);
* a variable a container already sets in ``env`` keeps the user's value; the marker records
  it under ``kept``. ``envFrom`` cannot be seen at admission: such a container gets a warning;
* a data set named by the Alnair annotation that the bus does not know is left out of the
  environment and reported (``unknown``; the service sends a Warning Event); a seed-form
  (hostPath) data set is always named: its source is the path, the bus need not know it yet;
* the seed form's hostPath volumes that every container mounts read-only are switched: their
  mounts point at a dataset CSI volume beside them (:mod:`._csi_switch`), so unchanged code
  reading the mountPath reads through the cache; any other hostPath stays, with a warning;
* ``ai.centaurus.io/dataset-mutated`` records what was done; containers it lists are not
  touched again, so a re-admission (reinvocation after another webhook) changes only the
  containers added since, and otherwise nothing (``switched``: hostPath volume → its cache
  volume, for whoever reads the pod);
* a malformed annotation changes nothing and is reported (``invalid``): the pod is
  admitted, as it would be with the webhook down (failurePolicy Ignore).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from alnair_common.annotations import DATASET, DATASET_MUTATED, DATASET_S3_GATEWAY, SEED_CACHE_DATASET
from alnair_common.dataset_refs import DatasetRefError, pod_datasets, pod_host_paths

from ._csi_switch import switch_volumes
from ._pod_env import CacheEndpoint, PodDataset, mount_environment, shared_environment
from ._s3_sidecar import ENDPOINT as GATEWAY_ENDPOINT
from ._s3_sidecar import SIDECAR, has_sidecar, insert_sidecar, sidecar

CONTAINER_LISTS = ("initContainers", "containers")
Lookup = Callable[[str, str], "KnownDataset | None"]
"""(namespace, name) → what the bus knows of that data set, or None."""


@dataclass(frozen=True)
class KnownDataset:
    """A data set the hydrator reports on the bus (the ``cache_datasets`` bucket)."""

    name: str
    namespace: str
    source: str
    phase: str = ""


@dataclass
class PodMutation:
    """The JSON patch for one pod and what to tell about it."""

    patch: list[dict[str, Any]] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    invalid: str = ""


@dataclass
class _Marker:
    datasets: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    containers: dict[str, list[str]] = field(default_factory=dict)
    kept: dict[str, list[str]] = field(default_factory=dict)
    switched: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | None) -> _Marker:
        """The marker a previous pass wrote; one that does not parse counts as absent (the
        pass then re-checks every container, which adds nothing already set)."""
        try:
            data = json.loads(raw) if raw else {}
            return cls(list(data.get("datasets", [])), list(data.get("unknown", [])),
                       {str(k): list(v) for k, v in dict(data.get("containers", {})).items()},
                       {str(k): list(v) for k, v in dict(data.get("kept", {})).items()},
                       {str(k): str(v) for k, v in dict(data.get("switched", {})).items()})
        except (ValueError, TypeError, AttributeError):
            return cls()

    def dump(self) -> str:
        data: dict[str, Any] = {"datasets": self.datasets, "containers": self.containers}
        if self.kept:
            data["kept"] = self.kept
        if self.unknown:
            data["unknown"] = self.unknown
        if self.switched:
            data["switched"] = self.switched
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


def is_annotated(annotations: Mapping[str, str]) -> bool:
    return DATASET in annotations or SEED_CACHE_DATASET in annotations


def mutate_pod(pod: Mapping[str, Any], namespace: str, lookup: Lookup,
               endpoint: CacheEndpoint) -> PodMutation:
    """The mutation of ``pod`` (the Kubernetes JSON form) created in ``namespace``."""
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    if not is_annotated(annotations):
        return PodMutation()
    spec = pod.get("spec") or {}
    old = _Marker.parse(annotations.get(DATASET_MUTATED))
    host_paths = pod_host_paths(spec)
    try:
        refs = pod_datasets(annotations, host_paths)
        # the seed form alone (an Alnair-form name may stand for one of its data sets too)
        seed = SEED_CACHE_DATASET in annotations and bool(pod_datasets(
            {SEED_CACHE_DATASET: annotations[SEED_CACHE_DATASET]}, host_paths))
    except DatasetRefError as e:
        return PodMutation(invalid=str(e), warnings=[
            f"alnair dataset cache: {e}; the pod is admitted without the cache's environment"])
    if not refs:
        return PodMutation()  # cacheDataset: "no"
    resolved: list[PodDataset] = []
    unknown: list[str] = []
    for ref in refs:
        known = lookup(namespace, ref.name)
        if known is not None or ref.source:
            resolved.append(PodDataset(ref.name, (known.source if known else "") or ref.source,
                                       ref.volume))
        else:
            unknown.append(ref.name)
    out = PodMutation(datasets=[d.name for d in resolved], unknown=unknown)
    out.warnings += [
        f"alnair dataset cache: data set {name!r} is not known in namespace {namespace!r}; "
        f"create a Dataset (alnair.centaurus.io/v1) named {name} there. The pod's environment "
        "does not name it" for name in unknown]
    marker = _Marker(old.datasets or out.datasets, unknown, dict(old.containers), dict(old.kept),
                     dict(old.switched))
    gateway = bool(endpoint.s3_gateway_image and not endpoint.s3_endpoint
                   and annotations.get(DATASET_S3_GATEWAY, "").lower() != "off"
                   and any(d.source.startswith("s3://") for d in resolved))
    if gateway:
        endpoint = replace(endpoint, s3_endpoint=GATEWAY_ENDPOINT)
    shared = shared_environment(resolved, namespace, endpoint)
    for list_name in CONTAINER_LISTS:
        for index, container in enumerate(spec.get(list_name) or ()):
            name = container.get("name", "")
            if name in marker.containers or name == SIDECAR or not shared:
                continue
            set_, kept, ops = _container_patch(container, f"/spec/{list_name}/{index}",
                                               shared + mount_environment(resolved, _mounts(container)))
            out.patch += ops
            marker.containers[name] = set_
            if kept:
                marker.kept[name] = kept
            if container.get("envFrom"):
                out.warnings.append(
                    f"alnair dataset cache: container {name!r} uses envFrom, which the webhook "
                    "cannot read; the ALNAIR_* variables it set in env override any envFrom "
                    "values of the same names (set them in env to keep yours)")
    if seed:
        switch = switch_volumes(spec)
        out.patch += switch.patch
        out.warnings += switch.warnings
        marker.switched.update(switch.switched)
    if gateway and not has_sidecar(spec):  # last: it shifts the init containers' indices
        added = sidecar(endpoint.s3_gateway_image, shared, spec)
        out.patch.append(insert_sidecar(spec, added))
        marker.containers[SIDECAR] = [e["name"] for e in added["env"]]
    value = marker.dump()
    if out.patch or annotations.get(DATASET_MUTATED) != value:
        op = "replace" if DATASET_MUTATED in annotations else "add"
        out.patch.append({"op": op, "path": "/metadata/annotations/" + _pointer(DATASET_MUTATED),
                          "value": value})
    return out


def _container_patch(container: Mapping[str, Any], path: str, env: list[tuple[str, str]]
                     ) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(variables set, variables the container already had, patch operations)."""
    existing = {e.get("name") for e in container.get("env") or ()}
    added = [(k, v) for k, v in env if k not in existing]
    kept = [k for k, _ in env if k in existing]
    entries = [{"name": k, "value": v} for k, v in added]
    if not entries:
        return [], kept, []
    if container.get("env"):
        ops = [{"op": "add", "path": f"{path}/env/-", "value": e} for e in entries]
    else:
        ops = [{"op": "add", "path": f"{path}/env", "value": entries}]
    return [k for k, _ in added], kept, ops


def _mounts(container: Mapping[str, Any]) -> dict[str, str]:
    """Volume name → mountPath of the container's whole-volume mounts (first one wins)."""
    out: dict[str, str] = {}
    for mount in container.get("volumeMounts") or ():
        if not mount.get("subPath") and not mount.get("subPathExpr") and mount.get("name"):
            out.setdefault(mount["name"], mount.get("mountPath", ""))
    return out


def _pointer(key: str) -> str:
    """``key`` as one JSON-pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
