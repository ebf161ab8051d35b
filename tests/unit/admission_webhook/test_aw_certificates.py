"""The webhook's CA and serving certificate: issued, verified, renewed when due."""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from alnair_admission_webhook import issue, names_for, new_ca, renewal_reason

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
NAMES = names_for("alnair-admission-webhook", "alnair-system", ["127.0.0.1"])
MONTH = dt.timedelta(days=30)


def test_the_serving_certificate_is_signed_by_the_ca_and_names_the_service() -> None:
    ca_cert, ca_key = new_ca("test-ca", 3650, NOW)
    pki = issue(ca_cert, ca_key, NAMES, 365, NOW)
    cert, ca = pki.serving(), pki.ca()
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes,
                           ec.ECDSA(cert.signature_hash_algorithm))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "alnair-admission-webhook.alnair-system.svc" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert renewal_reason(pki, NAMES, NOW, MONTH) == ""


def test_renewal_is_due_before_expiry_and_for_a_missing_name() -> None:
    ca_cert, ca_key = new_ca("test-ca", 3650, NOW)
    pki = issue(ca_cert, ca_key, NAMES, 40, NOW)
    assert renewal_reason(pki, NAMES, NOW + dt.timedelta(days=5), MONTH) == ""
    assert "serving certificate expires" in renewal_reason(pki, NAMES, NOW + dt.timedelta(days=11), MONTH)
    assert "does not name other.svc" in renewal_reason(pki, (*NAMES, "other.svc"), NOW, MONTH)
    short_ca = new_ca("short", 20, NOW)
    assert "the CA expires" in renewal_reason(issue(*short_ca, NAMES, 365, NOW), NAMES, NOW, MONTH)


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    ca_cert, ca_key = new_ca("test-ca", 10, NOW)
    pki = issue(ca_cert, ca_key, NAMES, 365, NOW)
    assert pki.serving().not_valid_after_utc == pki.ca().not_valid_after_utc
