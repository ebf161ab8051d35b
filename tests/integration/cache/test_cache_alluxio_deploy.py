"""The Alluxio overlay (k8s/overlays/alluxio) as an operator applies it: rendered by the
pinned kubectl's kustomize, its Alluxio objects and the re-pointed hydrator accepted by a
real kube-apiserver (server-side dry run, strict field validation), and wired the way the
tier and the test harness need it."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path

import yaml

from alnair_common.testing.alluxio import site_properties
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.testbin import locate

REPO = Path(__file__).resolve().parents[3]
OVERLAY = REPO / "k8s" / "overlays" / "alluxio"


def rendered() -> list[dict]:
    done = subprocess.run([str(locate().path("kubectl")), "kustomize", str(OVERLAY)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def named(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name)]
    return doc


def test_the_overlay_points_the_hydrator_and_the_pods_at_the_proxy_of_the_pinned_alluxio():
    docs = rendered()
    hydrator = named(docs, "Deployment", "alnair-cache-hydrator")
    env = {e["name"]: e.get("value") for e in hydrator["spec"]["template"]["spec"]["containers"][0]["env"]}
    host, port = re.fullmatch(r"alluxio://([\w.-]+):(\d+)", env["ALNAIR_CACHE_TIER_URL"]).groups()
    webhook = named(docs, "Deployment", "alnair-admission-webhook")
    handed = {e["name"]: e.get("value") for e in webhook["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert handed["ALNAIR_POD_TIER_URL"] == env["ALNAIR_CACHE_TIER_URL"], "pods read where the hydrator writes"
    service = named(docs, "Service", host.split(".")[0])
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == int(port)
    worker = named(docs, "DaemonSet", "alnair-alluxio-worker")
    assert service["spec"]["selector"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    containers = {c["name"]: c for c in worker["spec"]["template"]["spec"]["containers"]}
    proxy_ports = {p["name"]: p["containerPort"] for p in containers["proxy"]["ports"]}
    assert proxy_ports[service_port["targetPort"]] == int(port)

    pinned = re.search(r"^ALLUXIO_VERSION=(\S+)$",
                       (REPO / "scripts/testbin.d/versions.env").read_text(), re.M).group(1)
    images = {c["image"] for d in docs if d["kind"] in ("StatefulSet", "DaemonSet")
              and "alluxio" in d["metadata"]["name"]
              for c in d["spec"]["template"]["spec"]["containers"]
              + d["spec"]["template"]["spec"].get("initContainers", [])}
    assert images == {f"docker.io/alluxio/alluxio:{pinned}"}

    site = named(docs, "ConfigMap", "alnair-alluxio-config")["data"]["alluxio-site.properties"]
    props = dict(line.split("=", 1) for line in site.splitlines() if line and not line.startswith("#"))
    tested = site_properties(Path("/x"), dict.fromkeys(("master_rpc", "master_web", "job_rpc",
                                                        "job_web", "worker_rpc", "worker_web",
                                                        "proxy_web"), 1), "1GB")
    for key in ("alluxio.proxy.s3.v2.version.enabled", "alluxio.user.file.writetype.default",
                "alluxio.master.journal.type", "alluxio.worker.tieredstore.level0.alias"):
        assert props[key] == tested[key], f"{key}: the overlay runs what the tests do not"
    mounts = {m["mountPath"] for m in containers["worker"]["volumeMounts"]}
    assert props["alluxio.worker.tieredstore.level0.dirs.path"] in mounts


def test_alluxio_takes_connections_from_alnair_and_its_proxy_port_from_labelled_namespaces_only():
    """The proxy authenticates no one and writes as well as reads: master, workers and proxies
    are Alnair's own; the REST port is opened to the namespaces labelled as cache clients."""
    docs = rendered()
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in docs
            if d["kind"] in ("StatefulSet", "DaemonSet") and "alluxio" in d["metadata"]["name"]}
    assert set(pods) == {"alnair-alluxio-master", "alnair-alluxio-worker"}

    def selects(policy: dict, labels: dict) -> bool:
        sel = policy["spec"]["podSelector"]
        return (sel.get("matchLabels", {}).items() <= labels.items()
                and all(labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", [])))

    policies = [d for d in docs if d["kind"] == "NetworkPolicy" and "alluxio" in d["metadata"]["name"]]
    for name, labels in pods.items():
        ingress = [rule for p in policies if selects(p, labels) for rule in p["spec"]["ingress"]]
        assert ingress, f"{name}: no NetworkPolicy selects it, so every pod of the cluster reaches it"
        for rule in ingress:
            (peer,) = rule["from"]
            if "namespaceSelector" in peer:  # another namespace: only labelled ones, only the REST port
                assert peer["namespaceSelector"] == {
                    "matchLabels": {"alnair.centaurus.io/cache-tier-clients": "true"}}, rule
                assert rule["ports"] == [{"protocol": "TCP", "port": 39999}], rule
                assert name == "alnair-alluxio-worker"  # the proxy runs in the worker's pod
            else:  # the policy's own namespace: Alnair's pods only
                assert peer == {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "alnair"}}}, rule
    proxy = [c for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "alnair-alluxio-worker"
             for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "proxy"]
    assert [p["containerPort"] for c in proxy for p in c["ports"] if p["name"] == "rest"] == [39999]


def test_the_apiserver_accepts_the_alluxio_objects(kube: KubeNamespace):
    ours = [d for d in rendered() if "alluxio" in d["metadata"]["name"]
            or d["metadata"]["name"] == "alnair-cache-hydrator" and d["kind"] == "Deployment"]
    assert {d["kind"] for d in ours} == {"ServiceAccount", "Service", "ConfigMap", "StatefulSet",
                                        "DaemonSet", "Deployment", "NetworkPolicy"}
    moved = []
    for doc in copy.deepcopy(ours):
        doc["metadata"]["namespace"] = kube.namespace  # the plane is shared between tests
        moved.append(doc)
    done = subprocess.run([str(locate().path("kubectl")), f"--kubeconfig={kube.kubeconfig}",
                           "apply", "--validate=strict", "--dry-run=server", "-f", "-"],
                          input=yaml.safe_dump_all(moved), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(moved)
