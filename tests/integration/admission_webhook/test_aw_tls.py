"""The TLS Secret on the real API server: replicas converge on one, renewal keeps or rotates
the CA as documented, and the manifest's RBAC is enough (and no more is used)."""

from __future__ import annotations

import base64
import copy
import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from conftest import MANIFEST, Webhook, pod_manifest, put_status
from kubernetes import client as k8s

from alnair_admission_webhook import PkiPolicy, TlsSecret, names_for
from alnair_common.annotations import DATASET
from alnair_common.testing.kube import KubeNamespace

NAMES = names_for("alnair-admission-webhook", "ns", ["127.0.0.1"])
NOW = dt.datetime.now(dt.UTC)


def secret(kube: KubeNamespace, name: str = "tls", *, days: int = 365, ca_days: int = 3650,
           at: dt.datetime = NOW, renew_days: int = 30) -> TlsSecret:
    return TlsSecret(kube.core, kube.namespace, name,
                     PkiPolicy(NAMES, ca_days, days, dt.timedelta(days=renew_days)), clock=lambda: at)


def test_replicas_starting_at_once_converge_on_one_secret(kube: KubeNamespace) -> None:
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda _: secret(kube).ensure(), range(4)))
    assert len({x.pki.ca_cert for x in loaded}) == 1
    assert len({x.pki.cert for x in loaded}) == 1
    assert sorted(x.action for x in loaded).count("created") == 1
    stored = kube.core.read_namespaced_secret("tls", kube.namespace).data
    assert base64.b64decode(stored["ca.crt"]) == loaded[0].pki.ca_cert


def test_a_serving_certificate_due_for_renewal_is_renewed_under_the_same_ca(kube: KubeNamespace) -> None:
    first = secret(kube, days=40).ensure()
    later = secret(kube, days=40, at=NOW + dt.timedelta(days=15)).ensure()
    assert later.action.startswith("renewed: the serving certificate expires")
    assert later.pki.ca_cert == first.pki.ca_cert and later.pki.cert != first.pki.cert
    assert later.ca_bundle == first.ca_bundle  # the configuration need not change


def test_a_ca_due_for_renewal_is_replaced_and_the_old_one_stays_in_the_bundle(kube: KubeNamespace) -> None:
    def at(day: int) -> TlsSecret:
        return secret(kube, ca_days=40, days=20, renew_days=5, at=NOW + dt.timedelta(days=day))

    first = at(0).ensure()
    later = at(36).ensure()  # the CA has 4 days left
    assert later.action == "renewed: the CA expires " + f"{first.pki.ca().not_valid_after_utc:%Y-%m-%d}"
    assert later.pki.ca_cert != first.pki.ca_cert
    assert later.ca_bundle == later.pki.ca_cert.strip() + b"\n" + first.pki.ca_cert.strip() + b"\n"
    again = at(37).ensure()
    assert again.action == "reused" and again.ca_bundle == later.ca_bundle
    gone = at(41).ensure()  # the old CA expired: it leaves the bundle
    assert gone.action == "reused" and gone.ca_bundle == later.pki.ca_cert.strip() + b"\n"


def test_a_secret_with_garbage_is_replaced(kube: KubeNamespace) -> None:
    kube.core.create_namespaced_secret(kube.namespace, {
        "metadata": {"name": "tls"}, "data": {"ca.crt": base64.b64encode(b"junk").decode()}})
    loaded = secret(kube).ensure()
    assert loaded.action.startswith("renewed: keys ca.key, tls.crt, tls.key missing")
    assert secret(kube).ensure().pki == loaded.pki


async def test_the_manifests_rbac_is_all_the_webhook_needs(webhook: Webhook, tmp_path: Path) -> None:
    """The webhook runs as a ServiceAccount bound to the manifest's Role and ClusterRole
    (names adapted to the test): it creates its Secret, patches the caBundle, mutates a pod
    and records an Event."""
    kube = webhook.kube
    webhook.kube = _as_service_account(kube, webhook.configuration, tmp_path)
    try:
        await put_status(webhook.nats, kube.namespace, "imagenet", "s3://images/train")
        service = await webhook.start()
        assert service.loaded is not None and service.loaded.action == "created"
        webhook.kube = kube  # kubectl as the admin again: the pods are the user's
        pod, _ = await webhook.create_pod(pod_manifest("rbac", {DATASET: "imagenet,absent"}))
        assert pod["spec"]["containers"][0]["env"][0] == {"name": "ALNAIR_DATASET", "value": "imagenet"}
        from test_aw_admission import _event

        from alnair_common.testing import wait_for

        await wait_for(lambda: _event(webhook, "rbac"), timeout=15, what="the webhook's Event")
    finally:
        webhook.kube = kube
        rbac = k8s.RbacAuthorizationV1Api(kube.api_client)
        rbac.delete_cluster_role_binding(f"alnair-admission-webhook-{kube.namespace}")
        rbac.delete_cluster_role(f"alnair-admission-webhook-{kube.namespace}")


def _as_service_account(kube: KubeNamespace, configuration: str, tmp_path: Path) -> KubeNamespace:
    rbac = k8s.RbacAuthorizationV1Api(kube.api_client)
    suffix = kube.namespace
    for doc in (d for d in yaml.safe_load_all(MANIFEST.read_text()) if d):
        doc = copy.deepcopy(doc)
        kind = doc["kind"]
        if kind == "ServiceAccount":
            kube.core.create_namespaced_service_account(kube.namespace, doc)
        elif kind == "Role":
            rbac.create_namespaced_role(kube.namespace, doc)
        elif kind == "RoleBinding":
            doc["subjects"][0]["namespace"] = kube.namespace
            rbac.create_namespaced_role_binding(kube.namespace, doc)
        elif kind == "ClusterRole":
            doc["metadata"]["name"] += f"-{suffix}"
            for rule in doc["rules"]:
                if rule.get("resourceNames") == ["alnair-admission-webhook"]:
                    rule["resourceNames"] = [configuration]
            rbac.create_cluster_role(doc)
        elif kind == "ClusterRoleBinding":
            doc["metadata"]["name"] += f"-{suffix}"
            doc["roleRef"]["name"] += f"-{suffix}"
            doc["subjects"][0]["namespace"] = kube.namespace
            rbac.create_cluster_role_binding(doc)
    token = kube.core.create_namespaced_service_account_token(
        "alnair-admission-webhook", kube.namespace,
        {"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}},
    ).status.token
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "t", "cluster": {
            "server": kube.plane.server,
            "certificate-authority-data": base64.b64encode(kube.plane.pki.ca_cert.read_bytes()).decode()}}],
        "users": [{"name": "webhook", "user": {"token": token}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "webhook", "namespace": kube.namespace}}],
        "current-context": "t",
    }
    path = tmp_path / "webhook.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return KubeNamespace(kube.plane, kube.namespace, kube.api_client, path)
