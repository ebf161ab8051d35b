"""A throw-away PKI for the test control plane: one CA, a serving cert, an admin cert.

kube-apiserver only serves HTTPS and the official clients verify it, so the harness mints
its own CA per session rather than turning verification off (which would also raise
urllib3's InsecureRequestWarning, an error under the suite's ``filterwarnings``). The
admin client certificate carries ``O=system:masters`` so RBAC lets the tests do anything,
as a cluster admin's kubeconfig would. ECDSA P-256 keys are used because generating them
costs microseconds; the same kind of key signs ServiceAccount tokens (ES256).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class PkiFiles:
    """Paths of the PEM files the apiserver and its clients need."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_public_key: Path


def write_test_pki(directory: Path, *, admin_user: str = "alnair-test-admin") -> PkiFiles:
    """Create the CA, certs and keys under ``directory`` and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alnair-test-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def issue(common_name: str, orgs: list[str], usage: x509.ObjectIdentifier,
              sans: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in orgs]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return _pem_cert(cert), _pem_key(key)

    serving = issue(
        "kube-apiserver", [], ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
    )
    admin = issue(admin_user, ["system:masters"], ExtendedKeyUsageOID.CLIENT_AUTH, [])
    files = PkiFiles(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        service_account_key=directory / "service-account.key",
        service_account_public_key=directory / "service-account.pub",
    )
    files.ca_cert.write_bytes(_pem_cert(ca_cert))
    files.serving_cert.write_bytes(serving[0])
    files.serving_key.write_bytes(serving[1])
    files.admin_cert.write_bytes(admin[0])
    files.admin_key.write_bytes(admin[1])
    sa_key = ec.generate_private_key(ec.SECP256R1())
    files.service_account_key.write_bytes(_pem_key(sa_key))
    files.service_account_public_key.write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for key_file in (files.serving_key, files.admin_key, files.service_account_key):
        key_file.chmod(0o600)
    return files


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        # SEC1 ("EC PRIVATE KEY"): the form every Kubernetes key loader accepts.
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
