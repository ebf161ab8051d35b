"""scripts/bus-credentials, run as an operator runs it: private files, stable reruns, renewals.

The dev loop runs it on every load of the Tiltfile, so a rerun must change nothing (a file
rewritten with the same content would make Tilt reload forever); a rerun for another
namespace must reissue only the server's certificate, keeping every identity and the CA the
pods trust. What it writes is applied with ``kubectl apply -k``: kustomize must build it
into the Secrets the bundle mounts, and nothing else — no seed of an identity that does not
run on Kubernetes, no operator seed in the cluster.
"""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography import x509
from deploy_render import NAMESPACE, SERVICES, generate_bus_credentials, kustomize_build, load_docs
from test_deploy_manifests import bus_role

from alnair_common.credentials import public_key


def snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode & 0o777)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def sans(path: Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
               .get_values_for_type(x509.DNSName))


def test_everything_secret_is_private_to_its_owner(tmp_path: Path) -> None:
    out = tmp_path / "bus"
    generate_bus_credentials(out)
    for directory in (out, *[p for p in out.rglob("*") if p.is_dir()]):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    private = [*out.glob("credentials/*.nk"), out / "tls" / "tls.key", out / "tls" / "ca.key",
               out / "nats" / "authorization.conf"]
    for path in private:
        assert path.stat().st_mode & 0o777 == 0o600, path
    roles = {p.stem for p in out.glob("credentials/*.nk")}
    assert roles == {*(bus_role(name) for name in SERVICES), "cli"}, "seeds of identities Kubernetes does not run"


def test_a_rerun_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "bus"
    generate_bus_credentials(out, "--namespace", NAMESPACE)
    before = snapshot(out)
    done = generate_bus_credentials(out, "--namespace", NAMESPACE)
    assert snapshot(out) == before, "a rerun rewrote files (the Tiltfile would reload in a loop)"
    assert "up to date" in done.stderr


def test_another_namespace_reissues_only_the_certificate(tmp_path: Path) -> None:
    out = tmp_path / "bus"
    generate_bus_credentials(out)
    before = snapshot(out)
    generate_bus_credentials(out, "--namespace", "gpu-team")
    after = snapshot(out)
    changed = {name for name in after if after[name][0] != before[name][0]}
    assert changed == {"tls/tls.crt", "tls/tls.key", "kustomization.yaml"}, changed
    assert "alnair-nats.gpu-team.svc" in sans(out / "tls" / "tls.crt")
    assert not any(".alnair-system" in name for name in sans(out / "tls" / "tls.crt"))


def test_a_lost_ca_is_replaced_and_the_certificate_reissued_under_it(tmp_path: Path) -> None:
    out = tmp_path / "bus"
    generate_bus_credentials(out)
    seeds = {p.name: p.read_bytes() for p in out.glob("credentials/*.nk")}
    (out / "tls" / "ca.key").unlink()
    generate_bus_credentials(out)
    ca = x509.load_pem_x509_certificate((out / "tls" / "ca.crt").read_bytes())
    x509.load_pem_x509_certificate((out / "tls" / "tls.crt").read_bytes()).verify_directly_issued_by(ca)
    assert {p.name: p.read_bytes() for p in out.glob("credentials/*.nk")} == seeds


def test_a_damaged_seed_is_reported_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "bus"
    generate_bus_credentials(out)
    (out / "credentials" / "scheduler.nk").write_bytes(b"not a seed\n")
    try:
        generate_bus_credentials(out)
    except AssertionError as e:
        assert "not an NKey user seed" in str(e)
    else:
        raise AssertionError("a damaged seed was accepted")
    assert (out / "credentials" / "scheduler.nk").read_bytes() == b"not a seed\n"


def test_kustomize_builds_exactly_the_secrets_the_bundle_mounts(tmp_path: Path) -> None:
    out = tmp_path / "bus"
    generate_bus_credentials(out, "--namespace", "gpu-team")
    docs = load_docs(kustomize_build(out))
    assert {d["kind"] for d in docs} == {"Secret"}
    secrets = {d["metadata"]["name"]: d for d in docs}
    roles = [bus_role(name) for name in SERVICES]
    assert set(secrets) == {*(f"alnair-bus-{r}" for r in roles), "alnair-nats-auth", "alnair-nats-tls"}
    for doc in docs:
        assert doc["metadata"]["namespace"] == "gpu-team"
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "alnair"
    for role in roles:
        data = secrets[f"alnair-bus-{role}"]["data"]
        assert set(data) == {"seed"}
        assert base64.b64decode(data["seed"]) == (out / "credentials" / f"{role}.nk").read_bytes()
    values = [base64.b64decode(v) for d in docs for v in d["data"].values()]
    cli_seed = (out / "credentials" / "cli.nk").read_bytes().strip()
    ca_key = (out / "tls" / "ca.key").read_bytes().strip()
    assert not any(cli_seed in v or ca_key in v for v in values), "the operator's seed or the CA key went into a Secret"
    users = base64.b64decode(secrets["alnair-nats-auth"]["data"]["authorization.conf"]).decode()
    assert public_key(cli_seed) in users
    assert secrets["alnair-nats-tls"]["type"] == "kubernetes.io/tls"
    assert set(secrets["alnair-nats-tls"]["data"]) == {"tls.crt", "tls.key", "ca.crt"}
