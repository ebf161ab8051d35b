"""The TrainingJob CRD on a real kube-apiserver refuses what the domain refuses, with a
message that says the fix, and accepts what it accepts."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

import alnair_elastic_job as ej
from alnair_common.testing.kube import KubeNamespace

GOOD = {"command": ["python", "train.py"], "minReplicas": 2, "maxReplicas": 4,
        "worker": {"gpuMemoryGiB": 8, "gpuComputePercent": 30}}


def with_(**changes: object) -> dict:
    spec = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


CASES = [  # (spec, accepted, what the apiserver says)
    (GOOD, True, ""),
    (with_(worker={"gpus": 1}, launcher="torch", minReplicas=2, maxReplicas=2), True, ""),
    (with_(maxReplicas=None), True, ""),
    (with_(minReplicas=3, maxReplicas=2), False, "set minReplicas <= maxReplicas"),
    (with_(minReplicas=0), False, "should be greater than or equal to 1"),
    (with_(launcher="horovod"), False, "Horovod is unmaintained upstream"),
    (with_(launcher="mpi"), False, "unknown launcher"),
    (with_(launcher="torch"), False, "fixed world size"),
    (with_(worker={"gpuMemoryGiB": 8, "gpuComputePercent": 250}), False,
     "should be less than or equal to 100"),
    (with_(worker={"gpuMemoryGiB": 8}), False, "set either gpus"),
    (with_(worker={"gpus": 1, "gpuMemoryGiB": 8, "gpuComputePercent": 10}), False, "set either gpus"),
    (with_(command=[]), False, "should have at least 1 items"),
    (with_(command=None), False, "Required value"),
    (with_(restartPolicy={"backoffSeconds": 30, "maxBackoffSeconds": 5}), False,
     "maxBackoffSeconds is less than backoffSeconds"),
    (with_(deadlines={"schedulingTimeoutSeconds": 0}), False, "should be greater than 0"),
]


@pytest.fixture
def training_jobs(kube: KubeNamespace):
    group, version = "alnair.centaurus.io", "v1"
    assert kube.plane.apply_crds([ej.training_job_crd()]) == [f"trainingjobs.{group}"]
    objects = k8s.CustomObjectsApi(kube.api_client)

    def create(name: str, spec: dict, **kwargs: str) -> dict:
        body = {"apiVersion": f"{group}/{version}", "kind": "TrainingJob",
                "metadata": {"name": name}, "spec": spec}
        return objects.create_namespaced_custom_object(group, version, kube.namespace,
                                                       "trainingjobs", body, **kwargs)

    return create


def test_the_apiserver_and_the_domain_agree_on_every_case(training_jobs) -> None:
    for i, (spec, accepted, says) in enumerate(CASES):
        doc = {"apiVersion": "alnair.centaurus.io/v1", "kind": "TrainingJob",
               "metadata": {"name": f"job{i}"}, "spec": spec}
        try:
            ej.from_mapping(doc)
            domain_ok = True
        except ej.JobSpecError:
            domain_ok = False
        assert domain_ok == accepted, (spec, "the domain disagrees")
        if accepted:
            stored = training_jobs(f"job{i}", spec)
            assert stored["spec"]["launcher"] in ("torch-elastic", "torch"), "the default is applied"
            continue
        with pytest.raises(ApiException) as refused:
            training_jobs(f"job{i}", spec)
        assert refused.value.status == 422, (spec, refused.value.body)
        assert says in json.loads(refused.value.body)["message"], (spec, refused.value.body)


def test_an_unknown_field_is_refused_under_strict_validation(training_jobs) -> None:
    with pytest.raises(ApiException) as unknown:
        training_jobs("typo", with_(maxReplica=4), field_validation="Strict")
    assert unknown.value.status == 400
    assert 'unknown field "spec.maxReplica"' in json.loads(unknown.value.body)["message"]
