"""Alnair admission webhook: pods that name cached data sets read through the cache.

An adapter: a mutating admission webhook (``POST /mutate``, AdmissionReview v1, over TLS
with its own CA kept in a Secret) that adds the data client's environment to every
container of a pod annotated ``ai.centaurus.io/dataset`` or ``cacheDataset: "yes"``, from
what the ``cache_datasets`` bucket says exists. See the service's README for what is and is
not transparent to training code.
"""

from ._catalog import DatasetCatalog
from ._certificates import WebhookPki, issue, new_ca, renewal_reason
from ._errors import AdmissionWebhookError, CertificateError, ReviewError
from ._mutation import KnownDataset, PodMutation, mutate_pod
from ._pod_env import CacheEndpoint, PodDataset
from ._review import parse_review, review_response
from ._server import AdmissionServer
from ._service import AdmissionWebhookService
from ._settings import AdmissionWebhookSettings
from ._tls_secret import LoadedPki, PkiPolicy, TlsSecret, names_for, patch_ca_bundle

__all__ = [
    "AdmissionServer",
    "AdmissionWebhookError",
    "AdmissionWebhookService",
    "AdmissionWebhookSettings",
    "CacheEndpoint",
    "CertificateError",
    "DatasetCatalog",
    "KnownDataset",
    "LoadedPki",
    "PkiPolicy",
    "PodDataset",
    "PodMutation",
    "ReviewError",
    "TlsSecret",
    "WebhookPki",
    "issue",
    "mutate_pod",
    "names_for",
    "new_ca",
    "parse_review",
    "patch_ca_bundle",
    "renewal_reason",
    "review_response",
]
