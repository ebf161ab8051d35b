"""A real Kubernetes control plane for tests: etcd and kube-apiserver on loopback.

What runs: etcd (no fsync, it is a test) and kube-apiserver with RBAC, client-certificate
authentication and a throw-away CA (:mod:`._test_pki`). What does not run: the controller
manager and the kubelet. Consequences that tests must know about:

* namespaces stay ``Terminating`` after deletion and owner references are not garbage
  collected — each test gets its own namespace, so nothing leaks between tests;
* the ``ServiceAccount`` admission plugin is disabled, because without the controller that
  creates each namespace's ``default`` service account every pod would be rejected;
* pods are neither scheduled nor run unless something does it: the Binding API (as
  ``kube-bridge`` does) or kwok (:mod:`.kwok`) for pods bound to its fake nodes.

The project's CRDs (``k8s/**/crds/*.yaml``) are applied by the ``kube`` fixture so tests
see the same API the cluster will.
"""

from __future__ import annotations

import json
import re
import secrets
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._plane_errors import PlaneError
from ._server_process import ServerProcess
from ._test_pki import PkiFiles, write_test_pki
from .testbin import Testbin

START_TIMEOUT_SECONDS = 90.0
"""Deadline for etcd + apiserver readiness; a warm start takes a few seconds."""

CRD_ESTABLISHED_TIMEOUT_SECONDS = 30.0


@dataclass
class KubePlane:
    """A running etcd + kube-apiserver pair and the credentials to talk to it."""

    server: str
    kubeconfig: Path
    pki: PkiFiles
    workdir: Path
    testbin: Testbin
    processes: list[ServerProcess] = field(default_factory=list)

    def configuration(self) -> k8s.Configuration:
        """A client configuration with the admin certificate; verification stays on."""
        cfg = k8s.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.pki.ca_cert)
        cfg.cert_file = str(self.pki.admin_cert)
        cfg.key_file = str(self.pki.admin_key)
        return cfg

    def api_client(self) -> k8s.ApiClient:
        """A new ApiClient; the caller closes it (``with`` or ``.close()``)."""
        return k8s.ApiClient(self.configuration())

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig for kubectl or any client, defaulting to ``namespace``."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "alnair-test", "cluster": {
                "server": self.server, "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": "alnair-test-admin", "user": {
                "client-certificate": str(self.pki.admin_cert),
                "client-key": str(self.pki.admin_key)}}],
            "contexts": [{"name": "alnair-test", "context": {
                "cluster": "alnair-test", "user": "alnair-test-admin", "namespace": namespace}}],
            "current-context": "alnair-test",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def kubectl(self, *args: str, kubeconfig: Path | None = None, timeout: float = 60) -> str:
        """Run the pinned kubectl against this plane and return its stdout."""
        argv = [str(self.testbin.path("kubectl")),
                f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise PlaneError(
                f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}"
            )
        return done.stdout

    def apply_crds(self, documents: Iterable[dict[str, Any]]) -> list[str]:
        """Create or replace CustomResourceDefinitions and wait until each is Established.

        Returns the CRD names. Non-CRD documents are rejected: this is for API types,
        not for arbitrary manifests.
        """
        names: list[str] = []
        with self.api_client() as api_client:
            ext = k8s.ApiextensionsV1Api(api_client)
            for doc in documents:
                if doc.get("kind") != "CustomResourceDefinition":
                    raise PlaneError(
                        f"apply_crds got a {doc.get('kind')!r} document "
                        f"({doc.get('metadata', {}).get('name')!r}); only CRDs are applied"
                    )
                name = doc["metadata"]["name"]
                try:
                    ext.create_custom_resource_definition(body=doc)
                except ApiException as e:
                    if e.status != 409:
                        raise PlaneError(f"CRD {name}: create failed: {e.status} {e.body}") from e
                    version = ext.read_custom_resource_definition(name).metadata.resource_version
                    doc = {**doc, "metadata": {**doc["metadata"], "resourceVersion": version}}
                    ext.replace_custom_resource_definition(name, body=doc)
                names.append(name)
            for name in names:
                poll_until(
                    lambda n=name: _crd_established(ext, n),
                    what=f"CRD {name} Established",
                    timeout=CRD_ESTABLISHED_TIMEOUT_SECONDS,
                )
        return names

    def apply_crd_files(self, paths: Iterable[Path]) -> list[str]:
        """Apply every CRD found in the given YAML files (multi-document allowed)."""
        docs: list[dict[str, Any]] = []
        for path in paths:
            try:
                docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
            except yaml.YAMLError as e:
                raise PlaneError(f"CRD file {path}: invalid YAML: {e}") from e
        return self.apply_crds(d for d in docs if d.get("kind") == "CustomResourceDefinition")

    def stop(self) -> None:
        """Stop the apiserver before etcd so it does not spend its grace period retrying.

        The grace period is short: a graceful apiserver shutdown drains watches for many
        seconds, and nothing in a test plane is worth keeping.
        """
        for process in reversed(self.processes):
            process.stop(grace_seconds=3.0)


@dataclass
class KubeNamespace:
    """What a test gets from the ``kube`` fixture: its own namespace on the shared plane.

    ``kubeconfig`` defaults to ``namespace``, so ``kubectl`` and any client loading it
    land in the test's namespace; ``api_client`` is closed after the test.
    """

    plane: KubePlane
    namespace: str
    api_client: k8s.ApiClient
    kubeconfig: Path

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client)

    def kubectl(self, *args: str, timeout: float = 60) -> str:
        """Run the pinned kubectl in this namespace; return stdout, raise on failure."""
        return self.plane.kubectl(*args, kubeconfig=self.kubeconfig, timeout=timeout)


def open_namespace(plane: KubePlane, test_name: str, workdir: Path) -> KubeNamespace:
    """Create a fresh namespace named after the test, with a client and a kubeconfig."""
    name = namespace_name_for(test_name)
    api_client = plane.api_client()
    try:
        k8s.CoreV1Api(api_client).create_namespace(
            {"metadata": {"name": name, "labels": {"testplane.alnair.io/test": "true"}}})
    except BaseException:
        api_client.close()
        raise
    kubeconfig = plane.write_kubeconfig(workdir / "kubeconfig", namespace=name)
    return KubeNamespace(plane, name, api_client, kubeconfig)


def close_namespace(ns: KubeNamespace) -> None:
    """Remove the test's pods at once and delete its namespace, then close the client.

    Pods go with a zero grace period because no kubelet would ever confirm their end; the
    namespace itself stays Terminating (no namespace controller), which is harmless.
    """
    try:
        core = ns.core
        core.delete_collection_namespaced_pod(ns.namespace, grace_period_seconds=0)
        core.delete_namespace(ns.namespace)
    finally:
        ns.api_client.close()


def project_crd_files(repo_root: Path) -> list[Path]:
    """The project's CRD manifests: ``k8s/**/crds/*.yaml`` (none yet is fine)."""
    k8s_dir = repo_root / "k8s"
    if not k8s_dir.is_dir():
        return []
    return sorted(p for p in k8s_dir.glob("**/crds/*.yaml") if p.is_file())


def start_kube_plane(testbin: Testbin, workdir: Path, *,
                     timeout: float = START_TIMEOUT_SECONDS) -> KubePlane:
    """Start etcd and kube-apiserver on free loopback ports and wait until both are ready.

    Both start at once (the apiserver retries etcd), which saves etcd's start-up time.
    On any failure the processes already started are stopped before the error propagates.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    pki = write_test_pki(workdir / "pki")
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://{LOOPBACK}:{etcd_port}"
    peer_url = f"http://{LOOPBACK}:{peer_port}"
    processes: list[ServerProcess] = []
    try:
        etcd = ServerProcess("etcd", [
            testbin.path("etcd"),
            "--name=alnair-test",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=alnair-test={peer_url}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ], workdir / "etcd.log")
        processes.append(etcd)
        apiserver = ServerProcess("kube-apiserver", [
            testbin.path("kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={api_port}",
            f"--cert-dir={workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.service_account_public_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
            # As kubeadm and every managed cluster start it: privileged containers are for
            # the cluster's policy (Pod Security admission) to refuse, not for the server.
            "--allow-privileged=true",
            # No kube-proxy or endpoints to reconcile, and a loopback address is not a
            # valid endpoint IP anyway.
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ], workdir / "kube-apiserver.log")
        processes.append(apiserver)

        poll_until(lambda: _etcd_healthy(etcd_url), what=f"etcd healthy at {etcd_url}",
                   timeout=timeout, process=etcd)
        server = f"https://{LOOPBACK}:{api_port}"
        plane = KubePlane(server=server, kubeconfig=workdir / "kubeconfig", pki=pki,
                          workdir=workdir, testbin=testbin, processes=processes)
        context = _tls_context(pki)
        poll_until(lambda: _apiserver_ready(server, context),
                   what=f"kube-apiserver /readyz at {server}", timeout=timeout,
                   process=apiserver)
        plane.write_kubeconfig(plane.kubeconfig)
        return plane
    except BaseException:
        for process in reversed(processes):
            process.stop()
        raise


def namespace_name_for(test_name: str) -> str:
    """A fresh DNS-1123 namespace name that still says which test made it."""
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"t-{slug or 'test'}-{secrets.token_hex(3)}"


def _crd_established(ext: k8s.ApiextensionsV1Api, name: str) -> bool:
    crd = ext.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True"
               for c in (crd.status.conditions or []))


def _etcd_healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
        return json.load(response).get("health") == "true"


def _apiserver_ready(server: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(f"{server}/readyz", timeout=5, context=context) as response:
            return response.status == 200
    except urllib.error.HTTPError as e:  # 500 while post-start hooks run
        e.close()
        return False


def _tls_context(pki: PkiFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return context
