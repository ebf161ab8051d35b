"""The ``kube`` fixture is a real control plane: the apiserver stores, watches, patches,
deletes, serves kubectl, and validates custom resources against their OpenAPI schema."""

from __future__ import annotations

import contextlib
import json

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from alnair_common.testing.kube import KubeNamespace

GROUP = "testplane.alnair.io"
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {
                    "type": "object",
                    "required": ["gpuMemoryGiB"],
                    "properties": {
                        "gpuMemoryGiB": {"type": "integer", "minimum": 1, "maximum": 80},
                        "mode": {"type": "string", "enum": ["shared", "exclusive"]},
                    },
                }},
            }},
        }],
    },
}


def _pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": "alnair-scheduler",
                 "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


def test_pod_create_watch_patch_delete(kube: KubeNamespace) -> None:
    core = kube.core
    start = core.list_namespaced_pod(kube.namespace).metadata.resource_version

    created = core.create_namespaced_pod(kube.namespace, _pod("demo"))
    assert created.metadata.uid
    assert created.status.phase == "Pending"  # nothing schedules it: no scheduler runs

    core.patch_namespaced_pod("demo", kube.namespace,
                              {"metadata": {"annotations": {"ai.centaurus.io/note": "seen"}}})
    assert core.read_namespaced_pod("demo", kube.namespace).metadata.annotations == {
        "ai.centaurus.io/note": "seen"}

    core.delete_namespaced_pod("demo", kube.namespace)

    # Watching from the resource version before the create replays all three changes.
    seen: list[tuple[str, dict | None]] = []
    stream = watch.Watch().stream(core.list_namespaced_pod, kube.namespace,
                                  resource_version=start, timeout_seconds=20)
    with contextlib.closing(stream):
        for event in stream:
            seen.append((event["type"], event["object"].metadata.annotations))
            if event["type"] == "DELETED":
                break
    # The delete may show up first as a MODIFIED (deletionTimestamp set), then DELETED.
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED", kinds
    assert set(kinds[1:-1]) == {"MODIFIED"}, kinds
    assert seen[0][1] is None
    assert seen[1][1] == {"ai.centaurus.io/note": "seen"}

    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("demo", kube.namespace)
    assert gone.value.status == 404


def test_kubectl_reads_the_generated_kubeconfig(kube: KubeNamespace) -> None:
    kube.core.create_namespaced_pod(kube.namespace, _pod("via-client"))

    names = kube.kubectl("get", "pods", "-o", "name").split()
    version = json.loads(kube.kubectl("version", "-o", "json"))

    assert names == ["pod/via-client"]  # the kubeconfig's context is the test namespace
    assert version["serverVersion"]["gitVersion"] == "v1.36.3"


def test_crd_schema_accepts_valid_and_rejects_invalid_objects(kube: KubeNamespace) -> None:
    assert kube.plane.apply_crds([WIDGET_CRD]) == [f"widgets.{GROUP}"]
    objects = k8s.CustomObjectsApi(kube.api_client)

    def create(spec: dict, **kwargs: str) -> dict:
        body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget",
                "metadata": {"name": f"w{len(spec)}-{spec.get('gpuMemoryGiB', 'none')}"},
                "spec": spec}
        return objects.create_namespaced_custom_object(GROUP, "v1", kube.namespace,
                                                       "widgets", body, **kwargs)

    stored = create({"gpuMemoryGiB": 8, "mode": "shared"})
    assert stored["spec"] == {"gpuMemoryGiB": 8, "mode": "shared"}
    listed = objects.list_namespaced_custom_object(GROUP, "v1", kube.namespace, "widgets")
    assert [item["metadata"]["name"] for item in listed["items"]] == [stored["metadata"]["name"]]

    for invalid, complaint in [
        ({"gpuMemoryGiB": 250}, "should be less than or equal to 80"),
        ({"gpuMemoryGiB": "lots"}, "Invalid value"),
        ({"mode": "shared"}, "Required value"),
        ({"gpuMemoryGiB": 4, "mode": "greedy"}, "Unsupported value"),
    ]:
        with pytest.raises(ApiException) as rejected:
            create(invalid)
        assert rejected.value.status == 422, invalid
        assert complaint in rejected.value.body, rejected.value.body

    # An unknown field is pruned by default and rejected when the client asks for strict
    # validation, as Alnair's kube-bridge does.
    with pytest.raises(ApiException) as unknown:
        create({"gpuMemoryGiB": 2, "colour": "blue"}, field_validation="Strict")
    assert unknown.value.status == 400
    assert 'unknown field "spec.colour"' in json.loads(unknown.value.body)["message"]
