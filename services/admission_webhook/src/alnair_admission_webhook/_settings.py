"""Settings of the admission webhook (``ALNAIR_*`` environment variables)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pydantic import Field, SecretStr

from alnair_common import ServiceSettings
from alnair_common.tier_readers import ReaderKey


class AdmissionWebhookSettings(ServiceSettings):
    kubeconfig: Path | None = Field(
        None, description="kubeconfig to use; unset means in-cluster service-account credentials")
    listen_host: str = Field("127.0.0.1", description="address of the HTTPS endpoint; 0.0.0.0 "
                                                       "in the Deployment")
    listen_port: int = Field(8443, ge=0, le=65535, description="HTTPS port of /mutate; 0 picks a free one")
    webhook_namespace: str = Field("alnair-system", min_length=1,
                                   description="namespace of the webhook's Service and TLS Secret")
    webhook_service: str = Field("alnair-admission-webhook",
                                 description="the Service the API server calls (names in the certificate)")
    tls_secret: str = Field("alnair-admission-webhook-tls", min_length=1,
                            description="Secret holding the webhook's CA and serving certificate")
    tls_extra_names: str = Field("", description="more DNS names or IPs for the serving certificate, "
                                                 "comma-separated (e.g. 127.0.0.1 for a url webhook)")
    webhook_configuration: str = Field(
        "alnair-admission-webhook",
        description="MutatingWebhookConfiguration whose caBundle this webhook keeps current; "
                    "empty: leave it alone")
    ca_days: int = Field(3650, ge=2, le=36500)
    cert_days: int = Field(365, ge=2, le=3650)
    renew_before_days: float = Field(30.0, gt=0, le=3650,
                                     description="renew a certificate this long before it expires")
    tls_check_seconds: float = Field(3600.0, gt=0, le=86400,
                                     description="how often the Secret and the caBundle are checked")
    pod_tier_url: str = Field(
        "", description="ALNAIR_CACHE_TIER_URL handed to pods (the tier the hydrator writes, "
                        "as pods reach it); empty: pods read from their sources only")
    cache_reader_key: ReaderKey = Field(
        SecretStr(""), description="Key each namespace's read-only tier user is derived from "
                                   "(the cache hydrator's ALNAIR_CACHE_READER_KEY): pods get "
                                   "their namespace's user in the tier URL. Empty: the URL is "
                                   "handed as it is (a tier without users)")
    pod_cache_prefix: str = Field("alnair", min_length=1,
                                  description="ALNAIR_CACHE_PREFIX handed to pods (the hydrator's)")
    pod_s3_endpoint: str = Field(
        "", description="a cache-side S3 endpoint serving the data sets' buckets read-through; "
                        "set as AWS_ENDPOINT_URL_S3 in pods with an s3:// data set. Empty: none")
    pod_s3_gateway_image: str = Field(
        "", description="an image with the data client (alnair_dataset), run as each pod's S3 "
                        "gateway sidecar when a data set comes from s3:// and no "
                        "ALNAIR_POD_S3_ENDPOINT is set: the pod's S3 clients then read the data "
                        "sets through the cache. Empty: no sidecar")
    api_timeout_seconds: float = Field(5.0, gt=0, le=120)

    @property
    def extra_names(self) -> list[str]:
        return [n.strip() for n in self.tls_extra_names.split(",") if n.strip()]

    @property
    def renew_before(self) -> dt.timedelta:
        return dt.timedelta(days=self.renew_before_days)
