"""The admission webhook service: an adapter that serves on every replica, not leader-elected.

Start: the TLS Secret (created, reused or renewed, :mod:`._tls_secret`), the caBundle of the
webhook configuration, then a watch of the ``cache_datasets`` bucket (caught up before the
first answer, so a known data set is never reported unknown after a restart), then the HTTPS
endpoint. Every ``tls_check_seconds`` the Secret and the caBundle are checked again: a
certificate another replica renewed is loaded without a restart.

Kubernetes is used for the Secret, the caBundle and Events only; what data sets exist comes
from the bus.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from kubernetes import client as k8s

from alnair.v1 import cache_pb2
from alnair_common import KVWatch, Service, ServiceSettings, TypedKV, subjects
from alnair_common.kube_client import api_client

from ._catalog import DatasetCatalog
from ._errors import CertificateError
from ._events import PodEvents
from ._mutation import PodMutation
from ._pod_env import CacheEndpoint
from ._review import PodReview
from ._server import AdmissionServer
from ._settings import AdmissionWebhookSettings
from ._tls_secret import LoadedPki, PkiPolicy, TlsSecret, names_for, patch_ca_bundle

BUCKET = subjects.CACHE_DATASETS_BUCKET
CATCH_UP_SECONDS = 30.0


class AdmissionWebhookService(Service):
    name: ClassVar[str] = "admission-webhook"
    role: ClassVar[str] = "adapter: switches dataset-annotated pods to the cache at admission"
    settings_class: ClassVar[type[ServiceSettings]] = AdmissionWebhookSettings

    def __init__(self, settings: AdmissionWebhookSettings) -> None:
        super().__init__(settings)
        self.settings: AdmissionWebhookSettings = settings
        self.catalog = DatasetCatalog()
        self.server: AdmissionServer | None = None
        self.loaded: LoadedPki | None = None
        self.tls: TlsSecret | None = None
        self._api: k8s.ApiClient | None = None
        self._events: PodEvents | None = None
        self._pending: set[asyncio.Task[bool]] = set()

    @property
    def port(self) -> int:
        """The bound HTTPS port (after setup)."""
        return self.server.port if self.server is not None else 0

    async def setup(self) -> None:
        s = self.settings
        assert self.bus is not None
        self._api = api_client(s.kubeconfig)
        core = k8s.CoreV1Api(self._api)
        self._events = PodEvents(core, timeout=s.api_timeout_seconds)
        tls = self.tls = TlsSecret(core, s.webhook_namespace, s.tls_secret, PkiPolicy(
            names_for(s.webhook_service, s.webhook_namespace, s.extra_names), s.ca_days,
            s.cert_days, s.renew_before), timeout=s.api_timeout_seconds)
        self.loaded = await asyncio.to_thread(tls.ensure)
        self.log.info("tls ready", secret=f"{s.webhook_namespace}/{s.tls_secret}",
                      action=self.loaded.action)
        endpoint = CacheEndpoint(s.pod_tier_url, s.pod_cache_prefix, s.pod_s3_endpoint,
                                 s.cache_reader_key.get_secret_value(), s.pod_s3_gateway_image)
        if not s.pod_tier_url:
            self.log.warning("no ALNAIR_POD_TIER_URL: pods get the data sets' names and sources "
                             "but no tier, so they read from the sources")
        elif "@" in s.pod_tier_url.partition("://")[2].partition("/")[0] and not endpoint.reader_key:
            self.log.warning("ALNAIR_POD_TIER_URL carries a credential and there is no "
                             "ALNAIR_CACHE_READER_KEY: every annotated pod is handed it; set the "
                             "key so that pods get their namespace's read-only user instead")
        self.server = AdmissionServer(self.catalog.lookup, endpoint, self._report, s.listen_host,
                                      s.listen_port, s.data_dir / "admission-webhook")
        self.server.load(self.loaded.pki)
        await self._publish_bundle(self.loaded)
        watch = await (await TypedKV.open(self.bus, BUCKET, cache_pb2.CacheDatasetStatus)).watch()
        self.spawn(self._follow(watch), "catalog")
        await watch.caught_up(CATCH_UP_SECONDS)
        port = await self.server.start()
        # Ready follows the endpoint, not the bus: answering from the last copy of the
        # catalog while NATS is away beats every replica leaving the Service's endpoints
        # (then every pod would be admitted unmutated, failurePolicy Ignore).
        self.health.checks.pop("nats", None)
        self.spawn(self._keep_tls(), "tls")
        self.log.info("admission endpoint ready", port=port, datasets=len(self.catalog))

    async def teardown(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self._pending:
            await asyncio.wait(self._pending, timeout=self.settings.api_timeout_seconds)
        if self._api is not None:
            self._api.close()

    async def _follow(self, watch: KVWatch[cache_pb2.CacheDatasetStatus]) -> None:
        try:
            await self.catalog.follow(watch)
        finally:
            await watch.stop()

    async def _publish_bundle(self, loaded: LoadedPki) -> None:
        if not self.settings.webhook_configuration or self._api is None:
            return
        try:
            patched = await asyncio.to_thread(
                patch_ca_bundle, k8s.AdmissionregistrationV1Api(self._api),
                self.settings.webhook_configuration, loaded.ca_bundle,
                timeout=self.settings.api_timeout_seconds)
        except CertificateError as e:
            # Not fatal: the Secret is what replicas converge on; the next check retries.
            self.log.warning("caBundle not updated", error=str(e))
            return
        if patched:
            self.log.info("caBundle updated", configuration=self.settings.webhook_configuration,
                          webhooks=patched)

    async def _keep_tls(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tls_check_seconds)
            try:
                assert self.tls is not None
                loaded = await asyncio.to_thread(self.tls.ensure)
            except CertificateError as e:
                self.log.warning("tls check failed; serving the current certificate", error=str(e))
                continue
            if self.loaded is None or loaded.pki != self.loaded.pki:
                assert self.server is not None
                self.server.load(loaded.pki)
                self.log.info("tls reloaded", action=loaded.action)
            self.loaded = loaded
            await self._publish_bundle(loaded)

    def _report(self, review: PodReview, mutation: PodMutation) -> None:
        """Warning Events for what the webhook could not do, sent in the background."""
        if self._events is None or review.pod is None:
            return
        # One reason for both: what the webhook did not do to this pod. kube-bridge reports
        # the causes (DatasetNotFound, DatasetAnnotationInvalid) once the pod is stored.
        reason = "DatasetCacheSkipped"
        messages = [mutation.warnings[0]] if mutation.invalid else mutation.warnings[:len(mutation.unknown)]
        for message in messages:
            task = asyncio.create_task(asyncio.to_thread(
                self._events.warn, review.namespace, review.pod, reason, message))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
