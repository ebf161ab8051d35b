"""The environment the data client (alnair_dataset) reads, as the webhook writes it.

The names are alnair_dataset's (``dataset_environment`` there reads them back; a unit test
pins that the two agree). The webhook does not import the data client: that library is for
training images, and this service needs only its variable names.

* one data set: ``ALNAIR_DATASET`` and ``ALNAIR_DATASET_SOURCE``;
* several: ``ALNAIR_DATASETS=imagenet,coco`` and ``ALNAIR_DATASET_<NAME>_SOURCE`` each
  (``<NAME>``: upper case, ``-`` as ``_``), so ``DatasetReader("coco")`` finds its own;
* a seed-form (hostPath) data set mounted in the container: ``ALNAIR_DATASET_PATH`` or
  ``ALNAIR_DATASET_<NAME>_PATH``, the mountPath (misses are read there: the hydrator's path
  is the node's, not the container's);
* always ``ALNAIR_DATASET_NAMESPACE`` (the tier keys a data set ``<namespace>.<name>``),
  ``ALNAIR_CACHE_TIER_URL`` and ``ALNAIR_CACHE_PREFIX``; with a reader key, the URL carries
  the pod's namespace's read-only tier user (``alnair_common.tier_readers``), never the
  hydrator's credential;
* ``AWS_ENDPOINT_URL_S3`` only where a data set's source is ``s3://`` and the operator
  configured a cache-side S3 endpoint, or the S3 gateway sidecar (:mod:`._s3_sidecar`), whose
  loopback endpoint it then is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from alnair_common.tier_readers import has_users, reader_url

DATASET = "ALNAIR_DATASET"
DATASETS = "ALNAIR_DATASETS"
SOURCE = "ALNAIR_DATASET_SOURCE"
PATH = "ALNAIR_DATASET_PATH"
NAMESPACE = "ALNAIR_DATASET_NAMESPACE"
TIER_URL = "ALNAIR_CACHE_TIER_URL"
PREFIX = "ALNAIR_CACHE_PREFIX"
AWS_S3_ENDPOINT = "AWS_ENDPOINT_URL_S3"


def dataset_variable(name: str, suffix: str) -> str:
    """``ALNAIR_DATASET_<NAME>_<suffix>`` (alnair_dataset.dataset_variable)."""
    return f"ALNAIR_DATASET_{name.upper().replace('-', '_').replace('.', '_')}_{suffix}"


@dataclass(frozen=True)
class CacheEndpoint:
    """Where pods read the cache: the tier URL (as pods reach it, without credentials) and key
    prefix the hydrator writes with, the key their namespace's tier user is derived from
    (empty: the URL is handed as it is), and a cache-side S3 endpoint if one exists (empty:
    none, s3:// readers are left alone)."""

    tier_url: str
    prefix: str = "alnair"
    s3_endpoint: str = ""
    reader_key: str = field(default="", repr=False)
    s3_gateway_image: str = ""  # the S3 gateway sidecar's image (_s3_sidecar); empty: none

    def tier_url_for(self, namespace: str) -> str:
        if self.reader_key and has_users(self.tier_url):
            return reader_url(self.tier_url, self.reader_key, namespace)
        return self.tier_url


@dataclass(frozen=True)
class PodDataset:
    """A data set the pod reads, resolved: its source and (seed form) its volume."""

    name: str
    source: str
    volume: str = ""


def shared_environment(datasets: Sequence[PodDataset], namespace: str,
                       endpoint: CacheEndpoint) -> list[tuple[str, str]]:
    """What every container of the pod gets, in a fixed order."""
    if not datasets:
        return []
    if len(datasets) == 1:
        env = [(DATASET, datasets[0].name), (SOURCE, datasets[0].source)]
    else:
        env = [(DATASETS, ",".join(d.name for d in datasets))]
        env += [(dataset_variable(d.name, "SOURCE"), d.source) for d in datasets]
    env.append((NAMESPACE, namespace))
    if endpoint.tier_url:
        env.append((TIER_URL, endpoint.tier_url_for(namespace)))
    env.append((PREFIX, endpoint.prefix))
    if endpoint.s3_endpoint and any(d.source.startswith("s3://") for d in datasets):
        env.append((AWS_S3_ENDPOINT, endpoint.s3_endpoint))
    return env


def mount_environment(datasets: Sequence[PodDataset],
                      mounts: dict[str, str]) -> list[tuple[str, str]]:
    """The PATH variables of one container: ``mounts`` maps its volume names to mountPaths
    (whole-volume mounts only: a subPath mount shows a part of the source, not its root)."""
    single = len(datasets) == 1
    out = []
    for d in datasets:
        if d.volume and d.volume in mounts:
            out.append((PATH if single else dataset_variable(d.name, "PATH"), mounts[d.volume]))
    return out
