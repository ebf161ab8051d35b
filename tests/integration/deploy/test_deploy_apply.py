"""The bundle against a real kube-apiserver (v1.36, the test plane's pin).

* Both overlays pass a server-side dry run with strict field validation: every object is
  checked by the apiserver's own schemas and admission, not by a copy of them — prod with
  the bus's Secrets as scripts/bus-credentials writes them for an operator to apply.
* The RBAC of the bundle, applied for real, grants each service exactly what it uses: the
  apiserver's authorizer answers ``can-i`` for each service account — kube-bridge's
  training-jobs rights (ClusterRole ``alnair-kube-bridge-training-jobs``) nowhere until an
  operator binds them in a namespace, then there only.
* The examples are accepted; the deliberately invalid PodGroups and Datasets are refused by
  the schema.
"""

from __future__ import annotations

import copy
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_render import (
    K8S,
    NAMESPACE,
    OVERLAYS,
    generate_bus_credentials,
    kubectl,
    kustomize_build,
    load_docs,
    render,
)

from alnair_common.testing.kube import KubeNamespace

CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def into_namespace(docs: tuple[dict[str, Any], ...] | list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The documents moved from alnair-system into the test's namespace (the plane is shared)."""
    moved = []
    for doc in copy.deepcopy(list(docs)):
        if doc["kind"] == "Namespace":
            continue
        if doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            if subject.get("namespace") == NAMESPACE:
                subject["namespace"] = namespace
        moved.append(doc)
    return moved


def kubectl_apply(kube: KubeNamespace, docs: list[dict[str, Any]], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl()), f"--kubeconfig={kube.kubeconfig}", "apply", "--validate=strict", "-f", "-", *extra],
        input=yaml.safe_dump_all(docs), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_server_side_dry_run(kube: KubeNamespace, overlay: str, tmp_path: Path) -> None:
    docs = render(overlay)
    if overlay == "prod":
        # The operator creates the credentials (k8s/overlays/prod/kustomization.yaml): the
        # stores' by hand, the bus's with the generator (`kubectl apply -k <its output>`).
        kube.kubectl("create", "secret", "generic", "alnair-credentials", "--from-literal=mongo-password=x")
        generate_bus_credentials(tmp_path / "bus", "--namespace", NAMESPACE)
        docs = (*docs, *load_docs(kustomize_build(tmp_path / "bus")))
    done = kubectl_apply(kube, into_namespace(docs, kube.namespace), "--dry-run=server")
    assert done.returncode == 0, f"{overlay}: the apiserver refused the bundle:\n{done.stderr}"
    applied = [line for line in done.stdout.splitlines() if "(server dry run)" in line]
    expected = sum(1 for d in docs if d["kind"] != "Namespace")
    assert len(applied) == expected, f"{overlay}: {len(applied)} of {expected} objects accepted:\n{done.stdout}"
    # The namespace itself, as the bundle declares it.
    namespace = [d for d in docs if d["kind"] == "Namespace"]
    done = kubectl_apply(kube, namespace, "--dry-run=server")
    assert done.returncode == 0, done.stderr


def test_rbac_grants_each_service_what_it_uses_and_nothing_more(kube: KubeNamespace) -> None:
    suffix = secrets.token_hex(3)
    docs = into_namespace([d for d in render("prod") if d["kind"] in RBAC_KINDS], kube.namespace)
    cluster_names = {d["metadata"]["name"] for d in docs if d["kind"] in CLUSTER_SCOPED}
    for doc in docs:  # cluster-scoped names are global: make them this test's own
        if doc["kind"] in CLUSTER_SCOPED:
            doc["metadata"]["name"] += f"-{suffix}"
        if doc.get("roleRef", {}).get("name") in cluster_names and doc["roleRef"]["kind"] == "ClusterRole":
            doc["roleRef"]["name"] += f"-{suffix}"
    try:
        done = kubectl_apply(kube, docs)
        assert done.returncode == 0, done.stderr

        def can(account: str, verb: str, resource: str, *, all_namespaces: bool = False,
                namespace: str | None = None) -> bool:
            resource, _, subresource = resource.partition("/")
            args = ["auth", "can-i", verb, resource, f"--as=system:serviceaccount:{kube.namespace}:{account}"]
            if subresource:
                args.append(f"--subresource={subresource}")
            if all_namespaces:
                args.append("--all-namespaces")
            if namespace:
                args.append(f"--namespace={namespace}")
            answer = subprocess.run([str(kubectl()), f"--kubeconfig={kube.kubeconfig}", *args],
                                    capture_output=True, text=True, timeout=30)
            return answer.stdout.strip() == "yes"

        bridge = next(d["spec"]["template"]["spec"]["serviceAccountName"] for d in render("prod")
                      if d["metadata"]["name"] == "alnair-kube-bridge" and d["kind"] == "Deployment")
        for verb, resource in (("watch", "pods"), ("create", "pods/binding"), ("patch", "pods"),
                               ("watch", "nodes"), ("create", "events"),
                               ("watch", "podgroups.alnair.centaurus.io"),
                               ("patch", "podgroups.alnair.centaurus.io/status")):
            assert can(bridge, verb, resource, all_namespaces=True), f"kube-bridge cannot {verb} {resource}"
        for verb, resource in (("watch", "datasets.alnair.centaurus.io"), ("patch", "datasets.alnair.centaurus.io"),
                               ("patch", "datasets.alnair.centaurus.io/status")):
            assert can(bridge, verb, resource, all_namespaces=True), f"kube-bridge cannot {verb} {resource}"
        assert not can(bridge, "create", "datasets.alnair.centaurus.io", all_namespaces=True)
        for verb, resource in (("get", "secrets"), ("create", "pods"), ("delete", "pods"), ("delete", "nodes")):
            assert not can(bridge, verb, resource, all_namespaces=True), f"kube-bridge may {verb} {resource}"
        # TrainingJobs: read, held by a finalizer, their status written, in every namespace;
        # never created, deleted or rewritten.
        for verb, resource in (("watch", "trainingjobs.alnair.centaurus.io"),
                               ("get", "trainingjobs.alnair.centaurus.io"),
                               ("patch", "trainingjobs.alnair.centaurus.io"),
                               ("patch", "trainingjobs.alnair.centaurus.io/status")):
            assert can(bridge, verb, resource, all_namespaces=True), f"kube-bridge cannot {verb} {resource}"
        for verb, resource in (("create", "trainingjobs.alnair.centaurus.io"),
                               ("delete", "trainingjobs.alnair.centaurus.io"),
                               ("update", "trainingjobs.alnair.centaurus.io")):
            assert not can(bridge, verb, resource, all_namespaces=True), f"kube-bridge may {verb} {resource}"
        # The training jobs' rights (pods that run code) are bound by nobody in the bundle; an
        # operator binds them per namespace with the command of the README and of kube-bridge's
        # error event. Before that, nowhere; after it, there and only there.
        jobs_grants = (("create", "pods"), ("delete", "pods"), ("get", "pods/log"), ("get", "services"),
                       ("list", "services"), ("create", "services"), ("patch", "services"),
                       ("delete", "services"), ("create", "podgroups.alnair.centaurus.io"),
                       ("delete", "podgroups.alnair.centaurus.io"))
        elsewhere = f"{kube.namespace}-unbound"
        for verb, resource in jobs_grants:
            assert not can(bridge, verb, resource, namespace=kube.namespace), \
                f"kube-bridge may {verb} {resource} in a namespace nobody bound the training-jobs role in"
        jobs_role = f"alnair-kube-bridge-training-jobs-{suffix}"
        assert jobs_role in {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"}
        kube.kubectl("create", "rolebinding", "alnair-training-jobs", f"--clusterrole={jobs_role}",
                     f"--serviceaccount={kube.namespace}:{bridge}")
        for verb, resource in jobs_grants:
            assert can(bridge, verb, resource, namespace=kube.namespace), \
                f"kube-bridge cannot {verb} {resource} where the training-jobs role is bound"
            assert not can(bridge, verb, resource, namespace=elsewhere), \
                f"kube-bridge may {verb} {resource} in {elsewhere}, where the role is not bound"
            assert not can(bridge, verb, resource, all_namespaces=True), \
                f"kube-bridge may {verb} {resource} in every namespace"
        for verb, resource in (("update", "pods"), ("get", "secrets"), ("create", "pods/exec"),
                               ("create", "rolebindings.rbac.authorization.k8s.io")):
            assert not can(bridge, verb, resource, namespace=kube.namespace), \
                f"the training-jobs role lets kube-bridge {verb} {resource}"
        for agent in ("alnair-device-plugin", "alnair-exporter"):
            assert can(agent, "get", "nodes")
            for verb, resource in (("list", "nodes"), ("patch", "nodes"), ("get", "pods"), ("get", "secrets")):
                assert not can(agent, verb, resource, all_namespaces=True), f"{agent} may {verb} {resource}"
        assert can("alnair-prometheus", "watch", "pods")
        assert not can("alnair-prometheus", "watch", "pods", all_namespaces=True)
        assert not can("alnair-prometheus", "get", "secrets")
        for brain in ("alnair-scheduler", "alnair-profiler", "alnair-elastic-job", "alnair-cache-hydrator"):
            for verb, resource in (("get", "pods"), ("get", "nodes"), ("get", "configmaps"), ("get", "secrets")):
                assert not can(brain, verb, resource), f"{brain} is a brain but may {verb} {resource}"
    finally:
        for doc in docs:
            if doc["kind"] in CLUSTER_SCOPED:
                subprocess.run([str(kubectl()), f"--kubeconfig={kube.kubeconfig}", "delete", "--ignore-not-found",
                                doc["kind"].lower(), doc["metadata"]["name"]], capture_output=True, timeout=30)


def example_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_examples_are_accepted(kube: KubeNamespace) -> None:
    docs = [d for p in sorted((K8S / "examples").glob("*.yaml")) for d in example_docs(p)]
    assert {d["kind"] for d in docs} == {"Pod", "PodGroup", "Dataset", "TrainingJob"}
    done = kubectl_apply(kube, docs)
    assert done.returncode == 0, f"the examples were refused:\n{done.stderr}"
    pod = yaml.safe_load(kube.kubectl("get", "pod", "fractional-gpu-train", "-o", "yaml"))
    assert pod["spec"]["schedulerName"] == "alnair-scheduler"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["alnair/vgpu-memory"], limits["alnair/vgpu-compute"]) == ("8", "30")
    group = yaml.safe_load(kube.kubectl("get", "podgroup", "ddp-train", "-o", "yaml"))
    assert group["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 600}
    members = kube.kubectl("get", "pods", "-l", "alnair.centaurus.io/pod-group=ddp-train", "-o", "name").split()
    assert len(members) == group["spec"]["minMember"]
    dataset = yaml.safe_load(kube.kubectl("get", "dataset", "imagenet", "-o", "yaml"))
    assert (dataset["spec"]["pin"], dataset["spec"]["replicas"], dataset["spec"]["tier"]) == (True, 1, "redis")
    launchers = {n: yaml.safe_load(kube.kubectl("get", "trainingjob", n, "-o", "yaml"))["spec"]["launcher"]
                 for n in ("resnet", "bert-warm")}
    assert launchers == {"resnet": "torch-elastic", "bert-warm": "torch-inprocess"}


def invalid_examples(kind: str) -> list[tuple[str, dict[str, Any]]]:
    path = K8S / "examples" / "invalid" / f"{kind}-invalid.yaml"
    cases = []
    for chunk in path.read_text().split("\n---\n"):
        expect = next(line.split(":", 1)[1].strip() for line in chunk.splitlines() if line.startswith("# expect:"))
        cases.append((expect, yaml.safe_load(chunk)))
    return cases


@pytest.mark.parametrize("expect,doc", invalid_examples("podgroup") + invalid_examples("dataset"),
                         ids=lambda v: v if isinstance(v, str) else f"{v['kind']}-{v['metadata']['name']}")
def test_invalid_example_is_refused_by_the_schema(kube: KubeNamespace, expect: str, doc: dict[str, Any]) -> None:
    done = kubectl_apply(kube, [doc])
    assert done.returncode != 0, f"{doc['kind']} {doc['metadata']['name']} was accepted: {done.stdout}"
    assert expect in done.stderr, f"the refusal does not say {expect!r}: {done.stderr}"
    listed = kube.kubectl("get", doc["kind"].lower() + "s", "-o", "name")
    assert doc["metadata"]["name"] not in listed
