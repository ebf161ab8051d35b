"""The Dataset CustomResourceDefinition (``alnair.centaurus.io/v1``), built from the limits the
cache hydrator and the pod annotations hold names and sources to.

A Dataset asks the cache hydrator to keep a data set in the cache tier; kube-bridge turns it
into ``CacheDatasetRequest``s and writes the hydrator's status back (``_datasets``). The
apiserver refuses what the hydrator would (a source that is neither ``s3://bucket[/prefix]``
nor ``file:///absolute/path``, an empty or over-long pattern, a name the hydrator or a
subject token cannot carry), each with a CEL message that says the fix, so a bad spec fails
at ``kubectl apply`` instead of as a status nobody reads.

What may change after creation: ``pin`` and ``replicas`` (the hydrator updates a data set's
spec in place when the bytes it selects stay the same; kube-bridge sends the new spec as an
add). What selects the bytes — ``source``, ``include``, ``exclude`` — and the ``tier`` that
holds them are immutable: running pods read the data set by name, and swapping the bytes
under a name they read (or moving them to another tier) is a delete and a create, said so
at ``kubectl apply`` rather than done behind their back.

The YAML in ``k8s/base/crds/`` is this dict rendered: ``python
tests/unit/deploy/test_deploy_dataset_crd.py`` writes it, and the test fails when it is stale.
"""

from __future__ import annotations

from typing import Any

from alnair_common.crds import custom_resource_definition, rule

GROUP, VERSION, PLURAL, KIND = "alnair.centaurus.io", "v1", "datasets", "Dataset"
API_VERSION = f"{GROUP}/{VERSION}"
TIERS = ("redis", "alluxio")
MAX_PATTERNS, MAX_PATTERN_LENGTH = 64, 256  # the hydrator refuses a pattern over 256 chars
MAX_SOURCE_LENGTH, MAX_REPLICAS = 4096, 16
# S3 bucket names: 3 to 63 lower-case letters, digits, '.' and '-', alphanumeric at both ends.
S3_SOURCE = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$"
FILE_SOURCE = r"^file:///.*$"
# The hydrator's name rule and a DNS-1123 label at once (alnair_common.dataset_refs.check_name).
PHASES = ("Pending", "Hydrating", "Ready", "Failed", "Evicted", "Removed")


def _patterns(what: str) -> dict[str, Any]:
    return {"type": "array", "maxItems": MAX_PATTERNS, "description": what,
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_LENGTH}}


def _or_empty(field: str, obj: str = "self") -> str:
    return f"(has({obj}.{field}) ? {obj}.{field} : [])"


def spec_schema() -> dict[str, Any]:
    immutable = " && ".join([
        "self.source == oldSelf.source",
        f"{_or_empty('include')} == {_or_empty('include', 'oldSelf')}",
        f"{_or_empty('exclude')} == {_or_empty('exclude', 'oldSelf')}",
        "(has(self.tier) ? self.tier : 'redis') == (has(oldSelf.tier) ? oldSelf.tier : 'redis')",
    ])
    return {
        "type": "object",
        "required": ["source"],
        "x-kubernetes-validations": [
            rule(immutable, "spec.source, include, exclude and tier are immutable (pods read the "
                  "data set by name; its bytes do not change under them): delete the Dataset and "
                  "create it again, or create another one; pin and replicas may change"),
        ],
        "properties": {
            "source": {
                "type": "string", "minLength": 1, "maxLength": MAX_SOURCE_LENGTH,
                "pattern": f"{S3_SOURCE}|{FILE_SOURCE}",
                "description": "Where the data come from: s3://bucket[/prefix] or "
                               "file:///absolute/path (a local or NFS-mounted directory on the "
                               "hydrator's nodes)",
                "x-kubernetes-validations": [
                    rule("self.startsWith('s3://') || self.startsWith('file:///')",
                          "spec.source must be s3://bucket[/prefix] or file:///absolute/path "
                          "(e.g. s3://training-data/imagenet or file:///mnt/nfs/imagenet)"),
                    rule(f"!self.startsWith('s3://') || self.matches('{S3_SOURCE}')",
                          "spec.source: the S3 bucket name must be 3 to 63 lower-case letters, "
                          "digits, '.' or '-', starting and ending with a letter or digit "
                          "(s3://bucket[/prefix])"),
                    rule("!self.matches('(^|/)[.][.](/|$)')",
                          "spec.source must not contain '..' path segments: name the directory "
                          "itself"),
                ],
            },
            "include": _patterns("Glob patterns (fnmatch, '**' allowed) on paths relative to "
                                 "the source; empty selects everything"),
            "exclude": _patterns("Glob patterns of paths left out, even if included"),
            "pin": {"type": "boolean", "default": False,
                    "description": "Pinned data sets are never evicted from the tier"},
            "replicas": {"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS, "default": 1,
                         "description": "Desired copies in the tier"},
            "tier": {"type": "string", "enum": list(TIERS), "default": TIERS[0],
                     "description": "The cache tier that holds the data set"},
        },
    }


def _count(what: str) -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": 0, "description": what}


def status_schema() -> dict[str, Any]:
    """What kube-bridge writes from the hydrator's CacheDatasetStatus and from the pods."""
    condition = {
        "type": "object", "required": ["type", "status"],
        "properties": {
            "type": {"type": "string",
                     "description": "Ready, Hydrating, InUse or DeletionDeferred"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "description": "CamelCase, e.g. SourceUnreachable"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "phase": {"type": "string", "enum": list(PHASES),
                      "description": "The hydrator's phase of the data set"},
            "reason": {"type": "string",
                       "description": "Why (the hydrator's reason code, e.g. source-unreachable)"},
            "message": {"type": "string", "description": "The same for people, with the fix"},
            "totalBytes": _count("Bytes the selection holds at the source"),
            "cachedBytes": _count("Bytes of it in the tier"),
            "filesTotal": _count("Files the selection holds"),
            "filesCached": _count("Files readable from the tier"),
            "dedupSavedBytes": _count("Bytes other data sets had already stored (not stored again)"),
            "uniqueBytes": _count("Bytes the tier stores for this data set's chunks, once"),
            "progress": {"type": "number", "minimum": 0, "maximum": 1,
                         "description": "cachedBytes / totalBytes"},
            "cached": {"type": "string", "description": "cached/total, e.g. 1.2Gi/4.0Gi"},
            "nodes": {"type": "array", "maxItems": 1024, "items": {"type": "string"}},
            "requestId": {"type": "string", "description": "The request the status answers"},
            "observedAt": {"type": "string", "format": "date-time",
                           "description": "When the hydrator reported it; an older report is "
                                          "not written"},
            "observedGeneration": _count("metadata.generation last sent to the hydrator"),
            "conditions": {"type": "array", "items": condition, "maxItems": 16,
                           "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        },
    }


def dataset_crd() -> dict[str, Any]:
    """The whole CRD document (apiextensions.k8s.io/v1)."""
    columns = [("Phase", "string", ".status.phase", 0), ("Cached", "string", ".status.cached", 0),
               ("Files", "integer", ".status.filesCached", 1),
               ("Progress", "number", ".status.progress", 1),
               ("Reason", "string", ".status.reason", 1),
               ("Source", "string", ".spec.source", 1),
               ("Age", "date", ".metadata.creationTimestamp", 0)]
    # No short name: "ds" is kubectl's for DaemonSets.
    return custom_resource_definition(
        group=GROUP, version=VERSION, kind=KIND, plural=PLURAL, singular="dataset",
        columns=columns, spec=spec_schema(), status=status_schema(),
        name_note="the name pods give in ai.centaurus.io/dataset")
