"""The webhook's own small PKI: a CA and the serving certificate it signs (``cryptography``).

The API server trusts the CA (the configuration's ``caBundle``), not the serving
certificate, so the serving certificate can be renewed without touching the configuration;
only a new CA needs a new bundle, and the bundle then holds the old CA too until it expires,
so replicas still serving the old certificate stay trusted during a rollout.

Keys are ECDSA P-256 (small, fast handshakes; the API server's client accepts them).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ._errors import CertificateError


@dataclass(frozen=True)
class WebhookPki:
    """PEM bytes of the CA, its key, the serving certificate and its key."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def ca(self) -> x509.Certificate:
        return _load(self.ca_cert, "ca.crt")

    def serving(self) -> x509.Certificate:
        return _load(self.cert, "tls.crt")


def _load(pem: bytes, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise CertificateError(f"{what} is not a PEM certificate: {e}") from e


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _sans(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def new_ca(common_name: str, days: int, now: dt.datetime) -> tuple[bytes, bytes]:
    """(certificate, key) of a new self-signed CA valid ``days`` days from ``now``."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue(ca_cert: bytes, ca_key: bytes, names: Sequence[str], days: int,
          now: dt.datetime) -> WebhookPki:
    """A serving certificate for ``names`` (DNS names or IP addresses) signed by the CA."""
    if not names:
        raise CertificateError("a serving certificate needs at least one DNS name or IP")
    ca = _load(ca_cert, "ca.crt")
    try:
        signer = serialization.load_pem_private_key(ca_key, password=None)
    except (ValueError, TypeError) as e:
        raise CertificateError(f"ca.key is not an unencrypted PEM private key: {e}") from e
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise CertificateError("ca.key is not an ECDSA key (the webhook's CA uses P-256)")
    key = _key()
    not_after = min(now + dt.timedelta(days=days), ca.not_valid_after_utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(_sans(names)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                           critical=False)
            .sign(signer, hashes.SHA256()))
    return WebhookPki(ca_cert, ca_key, cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def renewal_reason(pki: WebhookPki, names: Sequence[str], now: dt.datetime,
                   renew_before: dt.timedelta) -> str:
    """Why ``pki`` must be renewed now ("" if it is fine): expiry within ``renew_before``, a
    name it lacks, a serving certificate the CA did not sign, a key that does not match."""
    ca, cert = pki.ca(), pki.serving()
    if ca.not_valid_after_utc - now < renew_before:
        return f"the CA expires {ca.not_valid_after_utc:%Y-%m-%d}"
    if cert.not_valid_after_utc - now < renew_before:
        return f"the serving certificate expires {cert.not_valid_after_utc:%Y-%m-%d}"
    if cert.issuer != ca.subject:
        return "the serving certificate is not signed by the CA"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the serving certificate has no subject alternative names"
    have = {str(v) for v in san.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    missing = [n for n in names if _normal(n) not in have]
    if missing:
        return f"the serving certificate does not name {', '.join(missing)}"
    try:
        key = serialization.load_pem_private_key(pki.key, password=None)
    except (ValueError, TypeError):
        return "tls.key is not a PEM private key"
    if key.public_key().public_bytes(serialization.Encoding.DER,
                                     serialization.PublicFormat.SubjectPublicKeyInfo) != \
            cert.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo):
        return "tls.key does not match tls.crt"
    return ""


def _normal(name: str) -> str:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def bundle(*certs: bytes) -> bytes:
    """A caBundle of the given PEM certificates, each once, in order."""
    seen: list[bytes] = []
    for cert in certs:
        cert = cert.strip() + b"\n"
        if cert.strip() and cert not in seen:
            seen.append(cert)
    return b"".join(seen)
