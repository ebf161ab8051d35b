"""The bus as the bundle configures it: the rendered nats.conf, run by the real nats-server.

The StatefulSet's volumes are written as the kubelet would write them (nats.conf from its
ConfigMap; beside it the users from Secret alnair-nats-auth; the certificate and key from
Secret alnair-nats-tls), from the rendered dev overlay whose Secrets scripts/bus-credentials
made. Only what cannot exist outside a pod changes: the pod's paths move under tmp_path and
the listen ports are free ones. A service run with its Deployment's environment and volumes
(its own seed, the CA, ``tls://``) then connects over TLS and becomes ready; a client
without credentials is refused, one that speaks plaintext gets nothing, one that does not
trust the CA never gets past the handshake, and an identity's forged publish is dropped by
the server itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import nkeys
import pytest
from deploy_render import NAMESPACE, PodFiles, find, generate_bus_credentials, main_container, materialize, render
from test_deploy_manifests import bus_role

from alnair.v1 import common_pb2, scheduling_pb2
from alnair_common import Bus, ensure_streams, subjects
from alnair_common.bus import encode
from alnair_common.errors import PermissionDeniedError
from alnair_common.natsd import free_port, nats_server_binary
from alnair_common.testing import wait_until

DOWNWARD = {"spec.nodeName": "node-1"}  # metadata.name: the pod's name, below


def read_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except OSError:
        return None


@dataclass(frozen=True)
class BundleNats:
    port: int
    monitor: int
    log: Path
    tmp: Path

    def dial(self, url: str) -> str:
        """A Deployment's ALNAIR_NATS_URL, reaching this server: only host and port change
        (localhost, which the certificate names for port-forwards, in place of the Service)."""
        parts = urlsplit(url)
        assert parts.scheme == "tls" and parts.hostname == "alnair-nats", url
        return parts._replace(netloc=f"localhost:{self.port}").geturl()


@dataclass(frozen=True)
class ServicePod:
    """A service's container as it would run: its files under ``files.root``, its environment."""

    name: str
    files: PodFiles
    env: dict[str, str]

    @property
    def credentials(self) -> Path:
        return Path(self.env["ALNAIR_NATS_CREDENTIALS"])

    @property
    def tls_ca(self) -> Path:
        return Path(self.env["ALNAIR_NATS_TLS_CA"])


def service_pod(bundle: BundleNats, kind: str, name: str) -> ServicePod:
    docs = render("dev")
    workload = find(docs, kind, name)
    files = materialize(workload, docs, bundle.tmp / name)
    env = {}
    for var in main_container(workload)["env"]:
        if "value" in var:
            env[var["name"]] = files.local(var["value"])
        else:
            field = var["valueFrom"]["fieldRef"]["fieldPath"]  # a Secret in env would be a KeyError here
            env[var["name"]] = DOWNWARD.get(field, f"{name}-0")
    env["ALNAIR_NATS_URL"] = bundle.dial(env["ALNAIR_NATS_URL"])
    return ServicePod(name, files, env)


@pytest.fixture
def bundle_nats(tmp_path: Path) -> Iterator[BundleNats]:
    docs = render("dev")
    sts = find(docs, "StatefulSet", "alnair-nats")
    container = main_container(sts)
    files = materialize(sts, docs, tmp_path / "nats")
    config = Path(files.local(container["args"][container["args"].index("--config") + 1]))
    text = config.read_text()
    # The pod's absolute paths (JetStream store, pid file, certificate and key) move with the volumes.
    in_pod = re.findall(r":\s*(/\S+)", text)
    expected = {"/data/jetstream", "/var/run/nats/nats.pid", "/etc/nats-tls/tls.crt", "/etc/nats-tls/tls.key"}
    assert expected <= set(in_pod), f"nats.conf's paths changed: {in_pod}"
    for path in in_pod:
        assert files.local(path) != path, f"nats.conf names {path}, which no volume of the pod holds"
        text = text.replace(f" {path}\n", f" {files.local(path)}\n")
    mode = config.stat().st_mode & 0o777
    config.chmod(0o600)
    config.write_text(text)
    config.chmod(mode)
    port, monitor = free_port(), free_port()
    log = tmp_path / "nats.log"
    env = {**os.environ, "POD_NAME": "alnair-nats-0"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(nats_server_binary()), "-c", str(config), "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor)],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        probe = container["readinessProbe"]["httpGet"]["path"]  # the StatefulSet's, verbatim
        wait_until(lambda: process.poll() is not None or http_status(f"http://127.0.0.1:{monitor}{probe}") == 200,
                   timeout=20, what="nats-server ready with JetStream")
        assert process.poll() is None, f"nats-server refused the bundle's config:\n{log.read_text()}"
        yield BundleNats(port, monitor, log, tmp_path)
    finally:
        process.terminate()
        process.wait(10)


def tls_handshake(port: int, context: ssl.SSLContext, hostname: str) -> dict:
    """TLS first, as the server wants it (handshake_first) and Bus.connect does it; the
    server's INFO then comes inside TLS. Raises ssl.SSLCertVerificationError on distrust."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=hostname) as conn:
        line = b""
        while not line.endswith(b"\r\n") and (chunk := conn.recv(1)):
            line += chunk
        assert line.startswith(b"INFO "), line
        info = json.loads(line[5:])
        assert info.get("tls_required") and info.get("auth_required"), info
        return info


def test_a_service_with_its_deployment_environment_connects_over_tls_and_becomes_ready(
        bundle_nats: BundleNats) -> None:
    pod = service_pod(bundle_nats, "Deployment", "alnair-scheduler")
    container = main_container(find(render("dev"), "Deployment", "alnair-scheduler"))
    assert pod.credentials.stat().st_mode & 0o777 == 0o400 and pod.tls_ca.is_file()
    health = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env.update(pod.env)
    env.update({"ALNAIR_HEALTH_HOST": "127.0.0.1", "ALNAIR_HEALTH_PORT": str(health)})  # port 8080 is the pod's
    script = Path(sys.executable).parent / container["name"].join(("alnair-", ""))
    process = subprocess.Popen([str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        probe = container["readinessProbe"]["httpGet"]["path"]
        wait_until(lambda: process.poll() is not None or http_status(f"http://127.0.0.1:{health}{probe}") == 200,
                   timeout=30, what="scheduler ready")
        assert process.poll() is None, f"the scheduler exited:\n{process.stdout.read()}"
        assert http_status(f"http://127.0.0.1:{health}{container['livenessProbe']['httpGet']['path']}") == 200
        connz = read_json(f"http://127.0.0.1:{bundle_nats.monitor}/connz?auth=true")["connections"]
        (conn,) = [c for c in connz if c.get("name") == "scheduler"]
        assert conn["tls_version"].startswith("1."), conn
        seed = pod.credentials.read_bytes().strip()
        assert conn["authorized_user"] == nkeys.from_seed(bytearray(seed)).public_key.decode()
    finally:
        process.terminate()
        process.wait(20)
        assert process.stdout is not None
        process.stdout.close()
    assert process.returncode == 0, f"graceful stop expected, exit {process.returncode}"


async def test_a_client_without_credentials_is_refused(bundle_nats: BundleNats) -> None:
    pod = service_pod(bundle_nats, "Deployment", "alnair-scheduler")
    with pytest.raises(PermissionDeniedError, match="refused no credentials"):
        await Bus.connect(pod.env["ALNAIR_NATS_URL"], service="intruder", tls_ca=pod.tls_ca,
                          first_connect_attempts=1)


def test_a_plaintext_client_with_valid_credentials_gets_nothing(bundle_nats: BundleNats) -> None:
    """Plain TCP gets not even the server's INFO (no nonce to sign), and a CONNECT sent blind
    with a valid key is answered with nothing: the server waits for a TLS handshake."""
    pod = service_pod(bundle_nats, "Deployment", "alnair-scheduler")
    key = nkeys.from_seed(bytearray(pod.credentials.read_bytes().strip()))
    with socket.create_connection(("127.0.0.1", bundle_nats.port), timeout=5) as conn:
        sig = base64.urlsafe_b64encode(key.sign(b"guessed-nonce")).rstrip(b"=").decode()
        connect = {"nkey": key.public_key.decode(), "sig": sig, "verbose": False, "pedantic": False}
        conn.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        reply = b""
        try:
            while chunk := conn.recv(4096):
                reply += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b"INFO" not in reply and b"PONG" not in reply, f"the server answered plain text: {reply!r}"
    connz = read_json(f"http://127.0.0.1:{bundle_nats.monitor}/connz")
    assert connz["num_connections"] == 0


def test_clients_that_do_not_trust_the_ca_fail_the_handshake(bundle_nats: BundleNats, tmp_path: Path) -> None:
    pod = service_pod(bundle_nats, "Deployment", "alnair-scheduler")
    other = tmp_path / "other-installation"
    generate_bus_credentials(other, "--namespace", NAMESPACE)
    for context in (ssl.create_default_context(),  # the system's trust store
                    ssl.create_default_context(cafile=str(other / "tls" / "ca.crt"))):  # another installation's CA
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            tls_handshake(bundle_nats.port, context, "alnair-nats")
    tls_handshake(bundle_nats.port, ssl.create_default_context(cafile=str(pod.tls_ca)), "alnair-nats")


def test_the_certificate_serves_the_in_cluster_names_and_no_others(bundle_nats: BundleNats) -> None:
    """The name check uses the dialled host (Bus.connect: ssl context, server_hostname = URL host)."""
    pod = service_pod(bundle_nats, "Deployment", "alnair-scheduler")
    context = ssl.create_default_context(cafile=str(pod.tls_ca))
    for name in ("alnair-nats", f"alnair-nats.{NAMESPACE}", f"alnair-nats.{NAMESPACE}.svc",
                 f"alnair-nats.{NAMESPACE}.svc.cluster.local", f"alnair-nats-0.alnair-nats-headless.{NAMESPACE}.svc",
                 "localhost"):
        tls_handshake(bundle_nats.port, context, name)
    for name in ("alnair-nats.default.svc", "nats.example.com"):
        with pytest.raises(ssl.SSLCertVerificationError, match="match"):
            tls_handshake(bundle_nats.port, context, name)


def test_a_service_that_does_not_trust_the_ca_never_becomes_ready(bundle_nats: BundleNats, tmp_path: Path) -> None:
    pod = service_pod(bundle_nats, "Deployment", "alnair-scheduler")
    other = tmp_path / "other-installation"
    generate_bus_credentials(other, "--namespace", NAMESPACE)
    health = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env.update(pod.env)
    env.update({"ALNAIR_HEALTH_HOST": "127.0.0.1", "ALNAIR_HEALTH_PORT": str(health),
                "ALNAIR_NATS_TLS_CA": str(other / "tls" / "ca.crt")})
    log = tmp_path / "scheduler.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(Path(sys.executable).parent / "alnair-scheduler")], env=env,
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        # It gives up after its first connection's budget and exits (a pod restarts it),
        # instead of hanging in the handshake until the startup probe gives up.
        assert process.wait(60) != 0
        assert "CERTIFICATE_VERIFY_FAILED" in log.read_text(), log.read_text()[-2000:]
        assert http_status(f"http://127.0.0.1:{health}/readyz") != 200
        connz = read_json(f"http://127.0.0.1:{bundle_nats.monitor}/connz")["connections"] or []
        assert not [c for c in connz if c.get("name") == "scheduler"], connz
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def forged_bind() -> scheduling_pb2.BindDecision:
    return scheduling_pb2.BindDecision(
        workload=common_pb2.WorkloadRef(uid="evil-1", name="big"),
        assignment=common_pb2.GpuAssignment(node="node-1", gpu_uuid="GPU-1", memory_gib=80))


async def connect_as(bundle: BundleNats, kind: str, name: str) -> Bus:
    """Connect in-process exactly as the workload's environment says (its seed, its CA, tls://)."""
    pod = service_pod(bundle, kind, name)
    return await Bus.connect(pod.env["ALNAIR_NATS_URL"], service=bus_role(name), credentials=pod.credentials,
                             tls_ca=pod.tls_ca, first_connect_attempts=1)


async def test_jetstream_serves_the_platform_streams(bundle_nats: BundleNats) -> None:
    bus = await connect_as(bundle_nats, "Deployment", "alnair-scheduler")
    try:
        await ensure_streams(bus)  # creates every stream and KV bucket on the JetStream store
        info = await bus.js.account_info()
        assert info.streams >= 1
    finally:
        await bus.drain()
    varz = await asyncio.to_thread(read_json, f"http://127.0.0.1:{bundle_nats.monitor}/varz")
    assert varz["server_name"] == "alnair-nats-0"
    assert varz["jetstream"]["config"]["max_memory"] == 256 * 1024 * 1024
    assert varz["tls_required"] is True and varz["auth_required"] is True


async def test_the_server_drops_an_exporters_forged_bind_decision(bundle_nats: BundleNats) -> None:
    scheduler = await connect_as(bundle_nats, "Deployment", "alnair-scheduler")
    exporter = await connect_as(bundle_nats, "DaemonSet", "alnair-exporter")
    subject = subjects.sched_bind()

    async def stored() -> int:
        info = await scheduler.js.stream_info("SCHEDULING", subjects_filter=subject)
        return (info.state.subjects or {}).get(subject, 0)

    try:
        await ensure_streams(scheduler)
        with pytest.raises(PermissionDeniedError, match="'exporter' may not publish"):
            await exporter.publish(subject, forged_bind())
        # Past the client's own check: the server itself must drop it.
        await exporter.nc.publish(subject, encode(subject, forged_bind()))
        await exporter.nc.flush()
        assert await stored() == 0, "the server stored a bind decision forged by the exporter"
        await scheduler.publish(subject, forged_bind())  # the one identity the table lets publish it
        assert await stored() == 1
    finally:
        await exporter.drain()
        await scheduler.drain()
    wait_until(lambda: "Publish Violation" in bundle_nats.log.read_text(), timeout=5,
               what="the server logging the refused publish")
    violation = next(line for line in bundle_nats.log.read_text().splitlines() if "Publish Violation" in line)
    assert subject in violation and "exporter" in violation, violation
