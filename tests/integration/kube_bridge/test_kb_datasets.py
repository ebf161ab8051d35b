"""Dataset objects served by kube-bridge against the real apiserver (the bundle's CRD, the
bridge holding only its RBAC rights) and nats-server: bad specs and names refused at
admission with the schema's messages, the immutable fields refused on change."""

from __future__ import annotations

import json

import pytest
from kb_datasets_support import SPEC, Datasets
from kubernetes.client.rest import ApiException

from alnair_common import Bus
from alnair_common.testing.kube import KubeNamespace


@pytest.fixture
def datasets(kube: KubeNamespace, bus: Bus) -> Datasets:
    return Datasets(kube, bus)


# -- admission ---------------------------------------------------------------------------------

REFUSED = [  # (name, spec, what the apiserver says)
    ("http", {"source": "http://example.com/data"}, "must be s3://bucket[/prefix] or file:///absolute/path"),
    ("relative", {"source": "file://data/imagenet"}, "must be s3://bucket[/prefix] or file:///absolute/path"),
    ("bucket", {"source": "s3://Bad_Bucket/x"}, "the S3 bucket name must be 3 to 63"),
    ("dotdot", {"source": "file:///data/../etc"}, "must not contain '..' path segments"),
    ("no-source", {"pin": True}, "spec.source: Required value"),
    ("empty-pattern", {**SPEC, "include": [""]}, "spec.include[0]: Invalid value"),
    ("long-pattern", {**SPEC, "exclude": ["x" * 257]}, "may not be more than 256 bytes"),
    ("many-patterns", {**SPEC, "include": [f"*.{i}" for i in range(65)]}, "must have at most 64 items"),
    ("replicas", {**SPEC, "replicas": 0}, "should be greater than or equal to 1"),
    ("tier", {**SPEC, "tier": "memcached"}, 'supported values: "redis", "alluxio"'),
    ("Upper", SPEC, "metadata.name must be a DNS-1123 label"),
    ("a.b", SPEC, "metadata.name must be a DNS-1123 label"),
]


def test_bad_specs_and_names_are_refused_with_a_readable_message(datasets: Datasets) -> None:
    for name, spec, says in REFUSED:
        with pytest.raises(ApiException) as refused:
            datasets.create(name, spec, dry_run="All")
        assert refused.value.status == 422, (name, refused.value.body)
        assert says in json.loads(refused.value.body)["message"], (name, refused.value.body)
    for spec in (SPEC, {"source": "s3://training-data"}, {"source": "s3://a.b-c/x/y", "pin": True,
                 "include": ["**/*.jpg"], "exclude": ["tmp/**"], "replicas": 2, "tier": "alluxio"}):
        datasets.create("good", spec, dry_run="All")
    stored = datasets.create("imagenet", SPEC)
    assert (stored["spec"]["pin"], stored["spec"]["replicas"], stored["spec"]["tier"]) == (False, 1, "redis")


def test_what_selects_the_bytes_is_immutable_pin_and_replicas_are_not(datasets: Datasets) -> None:
    datasets.create("imagenet", SPEC)
    for change in ({"source": "file:///data/other"}, {"include": ["*.jpg"]}, {"tier": "alluxio"}):
        with pytest.raises(ApiException) as refused:
            datasets.patch("imagenet", {"spec": change})
        assert refused.value.status == 422, change
        assert "are immutable" in json.loads(refused.value.body)["message"], change
    changed = datasets.patch("imagenet", {"spec": {"pin": True, "replicas": 3}})
    assert (changed["spec"]["pin"], changed["spec"]["replicas"], changed["metadata"]["generation"]) == (True, 3, 2)
