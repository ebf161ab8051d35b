"""The webhook's TLS material in one Secret, shared by every replica, and the caBundle.

On start each replica reads the Secret; if it is missing the replica creates it (a create
that finds it already there — another replica won — reads the winner's); if it is due for
renewal (:func:`renewal_reason`) the replica replaces it with the Secret's resourceVersion,
so of two replicas renewing at once one wins and the other reads the winner's. Every replica
therefore serves a certificate of the CA the Secret holds, and a restarted replica reuses it.

A renewed serving certificate keeps the CA; a CA close to expiry is replaced and the old one
kept as ``ca-previous.crt`` until it expires, in the caBundle beside the new one, so a
replica still serving a certificate of the old CA stays trusted while the others reload.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from ._certificates import WebhookPki, bundle, issue, new_ca, renewal_reason
from ._errors import CertificateError

CA_CERT, CA_KEY, CERT, KEY, PREVIOUS_CA = "ca.crt", "ca.key", "tls.crt", "tls.key", "ca-previous.crt"
ATTEMPTS = 5


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class PkiPolicy:
    """Names the serving certificate must carry and how long things live."""

    names: tuple[str, ...]
    ca_days: int = 3650
    cert_days: int = 365
    renew_before: dt.timedelta = dt.timedelta(days=30)


@dataclass(frozen=True)
class LoadedPki:
    """The PKI a replica serves with, the CA bundle for the API server, and how it came."""

    pki: WebhookPki
    previous_ca: bytes  # the CA before the last CA renewal, while it is valid; else b""
    action: str  # "reused", "created" or "renewed: <why>"

    @property
    def ca_bundle(self) -> bytes:
        return bundle(self.pki.ca_cert, self.previous_ca)


class TlsSecret:
    """Converges the replicas on one Secret ``namespace/name`` (blocking calls: run them in
    a thread)."""

    def __init__(self, core: k8s.CoreV1Api, namespace: str, name: str, policy: PkiPolicy, *,
                 timeout: float = 10.0, clock: Callable[[], dt.datetime] = _utcnow) -> None:
        self.core, self.namespace, self.name, self.policy = core, namespace, name, policy
        self.timeout, self.clock = timeout, clock

    def ensure(self) -> LoadedPki:
        """The Secret's PKI, created or renewed if needed; CertificateError if it cannot be."""
        for _ in range(ATTEMPTS):
            secret = self._read()
            if secret is None:
                loaded = self._fresh(None, "created")
                if self._write(None, loaded):
                    return loaded
                continue
            data = _decoded(secret)
            reason = self._reason(data)
            if not reason:
                return LoadedPki(_pki(data), self._previous(data), "reused")
            loaded = self._fresh(data, f"renewed: {reason}")
            if self._write(secret, loaded):
                return loaded
        raise CertificateError(f"Secret {self.namespace}/{self.name}: still changing under us "
                               f"after {ATTEMPTS} attempts; will retry")

    def _reason(self, data: dict[str, bytes]) -> str:
        missing = [k for k in (CA_CERT, CA_KEY, CERT, KEY) if not data.get(k)]
        if missing:
            return f"keys {', '.join(missing)} missing"
        try:
            return renewal_reason(_pki(data), self.policy.names, self.clock(),
                                  self.policy.renew_before)
        except CertificateError as e:
            return str(e)

    def _fresh(self, old: dict[str, bytes] | None, action: str) -> LoadedPki:
        now, p = self.clock(), self.policy
        previous = b""
        if old is not None and _ca_usable(old, now, p.renew_before):
            ca_cert, ca_key = old[CA_CERT], old[CA_KEY]
            previous = old.get(PREVIOUS_CA, b"")
        else:
            ca_cert, ca_key = new_ca(f"alnair-admission-webhook-ca {now:%Y%m%d%H%M%S}", p.ca_days, now)
            if old is not None and _ca_valid(old.get(CA_CERT, b""), now):
                previous = old[CA_CERT]
        pki = issue(ca_cert, ca_key, p.names, p.cert_days, now)
        return LoadedPki(pki, previous if _ca_valid(previous, now) else b"", action)

    def _previous(self, data: dict[str, bytes]) -> bytes:
        previous = data.get(PREVIOUS_CA, b"")
        return previous if _ca_valid(previous, self.clock()) else b""

    # -- the API ---------------------------------------------------------------------------

    def _read(self) -> k8s.V1Secret | None:
        try:
            return self.core.read_namespaced_secret(self.name, self.namespace,
                                                    _request_timeout=self.timeout)
        except ApiException as e:
            if e.status == 404:
                return None
            raise _api_error(f"reading Secret {self.namespace}/{self.name}", e) from e
        except OSError as e:  # urllib3's connection errors are OSErrors
            raise CertificateError(f"reading Secret {self.namespace}/{self.name}: {e}") from e

    def _write(self, current: k8s.V1Secret | None, loaded: LoadedPki) -> bool:
        """Create (``current`` None) or replace the Secret; False if another replica changed
        it first (the caller reads it again)."""
        pki = loaded.pki
        data = {CA_CERT: pki.ca_cert, CA_KEY: pki.ca_key, CERT: pki.cert, KEY: pki.key}
        if loaded.previous_ca:
            data[PREVIOUS_CA] = loaded.previous_ca
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {
                "app.kubernetes.io/name": "alnair-admission-webhook",
                "app.kubernetes.io/part-of": "alnair"}},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
        try:
            if current is None:
                self.core.create_namespaced_secret(self.namespace, body,
                                                   _request_timeout=self.timeout)
            else:
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                self.core.replace_namespaced_secret(self.name, self.namespace, body,
                                                    _request_timeout=self.timeout)
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise _api_error(f"writing Secret {self.namespace}/{self.name}", e) from e
        except OSError as e:
            raise CertificateError(f"writing Secret {self.namespace}/{self.name}: {e}") from e


def patch_ca_bundle(admission: k8s.AdmissionregistrationV1Api, configuration: str,
                    ca_bundle: bytes, *, timeout: float = 10.0) -> int:
    """Set ``caBundle`` of every webhook of MutatingWebhookConfiguration ``configuration``
    that lacks it; the number patched (0: all current). One JSON patch guarded by the
    configuration's resourceVersion: a concurrent writer makes it fail, and the next check
    (the caller's loop) patches again."""
    wanted = base64.b64encode(ca_bundle).decode()
    try:
        current = admission.read_mutating_webhook_configuration(configuration,
                                                                _request_timeout=timeout)
    except ApiException as e:
        raise _api_error(f"reading MutatingWebhookConfiguration {configuration}", e) from e
    except OSError as e:
        raise CertificateError(f"reading MutatingWebhookConfiguration {configuration}: {e}") from e
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                  "value": current.metadata.resource_version}]
    for i, hook in enumerate(current.webhooks or ()):
        have = hook.client_config.ca_bundle if hook.client_config else None
        if have != wanted:
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted})
    if len(ops) == 1:
        return 0
    try:
        admission.patch_mutating_webhook_configuration(configuration, ops, _request_timeout=timeout)
    except ApiException as e:
        raise _api_error(f"patching caBundle of MutatingWebhookConfiguration {configuration}", e) from e
    except OSError as e:
        raise CertificateError(f"patching MutatingWebhookConfiguration {configuration}: {e}") from e
    return len(ops) - 1


def names_for(service: str, namespace: str, extra: Sequence[str]) -> tuple[str, ...]:
    """The names the API server may use for the webhook's Service, then ``extra``."""
    base = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"] if service else []
    return tuple(dict.fromkeys([*base, *extra]))


def _decoded(secret: k8s.V1Secret) -> dict[str, bytes]:
    out = {}
    for key, value in (secret.data or {}).items():
        try:
            out[key] = base64.b64decode(value)
        except ValueError:
            out[key] = b""
    return out


def _pki(data: dict[str, bytes]) -> WebhookPki:
    return WebhookPki(data[CA_CERT], data[CA_KEY], data[CERT], data[KEY])


def _ca_valid(pem: bytes, now: dt.datetime) -> bool:
    try:
        return x509.load_pem_x509_certificate(pem).not_valid_after_utc > now
    except ValueError:
        return False


def _ca_usable(data: dict[str, bytes], now: dt.datetime, renew_before: dt.timedelta) -> bool:
    """The old CA can sign the new serving certificate: present, parseable, not near expiry."""
    try:
        ca = x509.load_pem_x509_certificate(data.get(CA_CERT, b""))
    except ValueError:
        return False
    return bool(data.get(CA_KEY)) and ca.not_valid_after_utc - now >= renew_before


def _api_error(what: str, e: ApiException) -> CertificateError:
    hint = " (the service account's Role must allow it: k8s/base/rbac/admission-webhook.yaml)" \
        if e.status == 403 else ""
    return CertificateError(f"{what}: HTTP {e.status} {e.reason}{hint}")
