"""Who holds which bus credential in the rendered bundle, and what the server is given.

Each service pod mounts exactly one NKey seed — its own role's, from its own Secret — as a
read-only 0400 file that ``ALNAIR_NATS_CREDENTIALS`` names, with the bus's CA beside it for
``ALNAIR_NATS_TLS_CA``; no seed reaches any environment, and no other pod mounts one. The
server mounts its users (generated from the subject table: the seeds' public keys with
``permissions(role)``) beside nats.conf, which includes them, and its certificate, which
names every Service a client may dial. The generated values are read from the rendered dev
overlay (credentials made by scripts/bus-credentials, as the Tiltfile makes them).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import PurePosixPath
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from deploy_render import NAMESPACE, OVERLAYS, SERVICES, find, main_container, pod_spec, render, workloads
from test_deploy_manifests import NODE_AGENTS, bus_role

from alnair_common.bus_permissions import permissions
from alnair_common.credentials import public_key

BUS_SECRET = re.compile(r"^alnair-bus-(.+)$")
TLS_SECRET = "alnair-nats-tls"
AUTH_SECRET = "alnair-nats-auth"
# An NKey seed as nkeys encodes it: "S" + the type's letter + base32.
SEED_TEXT = re.compile(r"S[A-Z][A-Z2-7]{40,}")


def kind_of(name: str) -> str:
    return "DaemonSet" if name in NODE_AGENTS else "Deployment"


def volume_secrets(volume: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]] | None, int | None]]:
    """(Secret name, items, defaultMode) of each Secret a volume projects or mounts."""
    if "secret" in volume:
        secret = volume["secret"]
        return [(secret["secretName"], secret.get("items"), secret.get("defaultMode"))]
    if "projected" in volume:
        mode = volume["projected"].get("defaultMode")
        return [(s["secret"]["name"], s["secret"].get("items"), mode)
                for s in volume["projected"]["sources"] if "secret" in s]
    return []


def secrets_of(workload: dict[str, Any]) -> dict[str, str]:
    """Secret name -> how the pod reads it (volume name, or 'env <VAR>'), every container included."""
    spec = pod_spec(workload)
    used = {name: f"volume {v['name']}" for v in spec.get("volumes", []) for name, _, _ in volume_secrets(v)}
    for container in spec.get("initContainers", []) + spec["containers"]:
        for var in container.get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                used[ref["name"]] = f"env {var['name']}"
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                used[source["secretRef"]["name"]] = "envFrom"
    return used


def secret_data(docs: tuple[dict[str, Any], ...], name: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in find(docs, "Secret", name)["data"].items()}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_mounts_its_own_seed_and_no_other(overlay: str) -> None:
    docs = render(overlay)
    for workload in workloads(docs):
        name = workload["metadata"]["name"]
        seeds = {s: how for s, how in secrets_of(workload).items() if BUS_SECRET.match(s)}
        if name not in SERVICES:
            assert not seeds, f"{name} is no bus identity but reads {seeds}"
            continue
        own = f"alnair-bus-{bus_role(name)}"
        assert list(seeds) == [own], f"{name} must read only {own}, reads {seeds}"
        assert seeds[own].startswith("volume "), f"{name} reads its seed through {seeds[own]}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_read_seed_and_ca_from_a_read_only_0400_volume(overlay: str) -> None:
    docs = render(overlay)
    for name in SERVICES:
        workload = find(docs, kind_of(name), name)
        container = main_container(workload)
        env = env_of(container)
        seed, ca = PurePosixPath(env["ALNAIR_NATS_CREDENTIALS"]), PurePosixPath(env["ALNAIR_NATS_TLS_CA"])
        assert seed.parent == ca.parent, f"{name}: seed and CA in different volumes"
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(seed.parent)]
        assert mount.get("readOnly") is True and "subPath" not in mount, f"{name}: {mount}"
        volume = next(v for v in pod_spec(workload)["volumes"] if v["name"] == mount["name"])
        sources = {secret: (items, mode) for secret, items, mode in volume_secrets(volume)}
        own = f"alnair-bus-{bus_role(name)}"
        assert set(sources) == {own, TLS_SECRET}, f"{name}: its bus volume projects {sorted(sources)}"
        assert sources[own][0] == [{"key": "seed", "path": seed.name}], f"{name}: seed items {sources[own][0]}"
        # The CA only: the server's key is in the same Secret and must never reach a client.
        assert sources[TLS_SECRET][0] == [{"key": "ca.crt", "path": ca.name}], f"{name}: {sources[TLS_SECRET][0]}"
        for secret, (items, mode) in sources.items():
            assert mode == 0o400 and all("mode" not in item for item in items), f"{name}: {secret} mode {mode}"
        if pod_spec(workload)["securityContext"].get("runAsNonRoot"):
            # The kubelet makes 0400 files group-readable for fsGroup: the pod's own group.
            sc = pod_spec(workload)["securityContext"]
            assert sc.get("fsGroup") == sc["runAsGroup"], f"{name}: a non-root pod needs fsGroup to read 0400"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_seed_and_no_bus_secret_in_any_environment(overlay: str) -> None:
    docs = render(overlay)
    for workload in workloads(docs):
        name = workload["metadata"]["name"]
        spec = pod_spec(workload)
        for container in spec.get("initContainers", []) + spec["containers"]:
            for var in container.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef", {})
                assert not BUS_SECRET.match(ref.get("name", "")) and ref.get("name") not in (TLS_SECRET, AUTH_SECRET), \
                    f"{name}: {var['name']} reads a bus Secret into the environment"
                assert "NATS_TOKEN" not in var["name"], f"{name}: the shared bus token is gone, {var['name']} is set"
                assert not SEED_TEXT.search(var.get("value", "")), f"{name}: {var['name']} holds a seed"
            assert not [s for s in container.get("envFrom", []) if "secretRef" in s], f"{name}: envFrom a Secret"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_dials_the_nats_service_over_tls(overlay: str) -> None:
    docs = render(overlay)
    service = find(docs, "Service", "alnair-nats")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "client")
    for name in SERVICES:
        env = env_of(main_container(find(docs, kind_of(name), name)))
        url = env["ALNAIR_NATS_URL"]
        assert url == f"tls://{service['metadata']['name']}:{port}", f"{name}: {url}"


def nats_conf(docs: tuple[dict[str, Any], ...]) -> str:
    return find(docs, "ConfigMap", "alnair-nats-config")["data"]["nats.conf"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_nats_includes_its_users_and_serves_tls_from_mounted_secrets(overlay: str) -> None:
    docs = render(overlay)
    conf = nats_conf(docs)
    assert "token" not in conf and "authorization {" not in conf, "users come from the generated include only"
    (include,) = re.findall(r"^\s*include\s+(\S+)\s*$", conf, re.M)
    tls = re.search(r"^\s*tls\s*\{(.*?)\}", conf, re.M | re.S)
    assert tls, "nats.conf has no tls block: client connections would be plaintext"
    files = dict(re.findall(r"(cert_file|key_file):\s*(\S+)", tls.group(1)))
    assert set(files) == {"cert_file", "key_file"}
    sts = find(docs, "StatefulSet", "alnair-nats")
    container = main_container(sts)
    config_dir = PurePosixPath(container["args"][container["args"].index("--config") + 1]).parent
    volumes = {v["name"]: v for v in pod_spec(sts)["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}

    def served(path: PurePosixPath) -> tuple[str, str, int | None]:
        """(Secret or ConfigMap, key, mode) the file at ``path`` in the container comes from."""
        mount = mounts[str(path.parent)]
        assert mount.get("readOnly") is True, f"{path}: mount {mount}"
        volume = volumes[mount["name"]]
        sources = volume["projected"]["sources"] if "projected" in volume else [volume]
        mode = volume.get("projected", volume.get("secret", {})).get("defaultMode")
        for source in sources:
            if "configMap" in source:
                kind, name, items = "ConfigMap", source["configMap"]["name"], source["configMap"].get("items")
            else:
                secret = source["secret"]
                kind, name, items = "Secret", secret.get("name", secret.get("secretName")), secret.get("items")
            for item in items or []:
                if item["path"] == path.name:
                    return f"{kind}/{name}", item["key"], item.get("mode", mode)
        raise AssertionError(f"{path} is not a file of volume {volume['name']}")

    assert served(config_dir / "nats.conf")[:2] == ("ConfigMap/alnair-nats-config", "nats.conf")
    assert served(config_dir / include) == (f"Secret/{AUTH_SECRET}", "authorization.conf", 0o400)
    assert served(PurePosixPath(files["cert_file"])) == (f"Secret/{TLS_SECRET}", "tls.crt", 0o400)
    assert served(PurePosixPath(files["key_file"])) == (f"Secret/{TLS_SECRET}", "tls.key", 0o400)
    sc = pod_spec(sts)["securityContext"]
    assert sc["fsGroup"] == sc["runAsGroup"], "nats-server (non-root) reads its 0400 files through fsGroup"


def test_the_server_admits_exactly_the_deployed_identities_with_their_table_permissions() -> None:
    docs = render("dev")
    users = json.loads(secret_data(docs, AUTH_SECRET)["authorization.conf"])["authorization"]["users"]
    by_key = {u["nkey"]: u["permissions"] for u in users}
    assert len(by_key) == len(users), "two users share a key"
    roles = {}
    for name in SERVICES:
        role = bus_role(name)
        key = public_key(secret_data(docs, f"alnair-bus-{role}")["seed"])
        assert key in by_key, f"the server does not know {name}'s seed"
        assert by_key[key] == permissions(role), f"{name}: its user's permissions differ from the subject table's"
        roles[key] = role
    (cli,) = set(by_key) - set(roles)  # the operator's `alnair` command; its seed stays off the cluster
    assert by_key[cli] == permissions("cli")
    assert not any(BUS_SECRET.match(d["metadata"]["name"]) and d["metadata"]["name"] not in
                   {f"alnair-bus-{r}" for r in roles.values()} for d in docs if d["kind"] == "Secret")


def dns_matches(pattern: str, name: str) -> bool:
    """RFC 6125 matching as TLS clients do it: a ``*`` stands for the whole leftmost label."""
    want, have = pattern.lower().split("."), name.lower().split(".")
    return len(want) == len(have) and all(w == h or (i == 0 and w == "*")
                                          for i, (w, h) in enumerate(zip(want, have, strict=True)))


def test_the_server_certificate_covers_every_name_of_the_nats_services() -> None:
    docs = render("dev")
    tls = find(docs, "Secret", TLS_SECRET)
    assert tls["type"] == "kubernetes.io/tls"
    data = secret_data(docs, TLS_SECRET)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    cert, ca = x509.load_pem_x509_certificate(data["tls.crt"]), x509.load_pem_x509_certificate(data["ca.crt"])
    cert.verify_directly_issued_by(ca)
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = sans.get_values_for_type(x509.DNSName)
    sts = find(docs, "StatefulSet", "alnair-nats")
    wanted = ["localhost"]  # kubectl port-forward, Tilt's forward of 4222
    for service in (d for d in docs if d["kind"] == "Service"
                    and d["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]):
        short = service["metadata"]["name"]
        wanted += [short, f"{short}.{NAMESPACE}", f"{short}.{NAMESPACE}.svc", f"{short}.{NAMESPACE}.svc.cluster.local"]
        if service["spec"].get("clusterIP") == "None":  # each pod's own name through the headless Service
            wanted += [f"{sts['metadata']['name']}-{i}.{short}.{NAMESPACE}.svc" for i in range(3)]
    for name in wanted:
        assert any(dns_matches(pattern, name) for pattern in dns), f"the certificate does not name {name}: {dns}"
    assert not any(dns_matches(p, "alnair-nats.other.svc") for p in dns)
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}
