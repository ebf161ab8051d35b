"""The HTTPS endpoint the API server calls: ``POST /mutate`` with an AdmissionReview v1.

The handler does no I/O of its own: it parses, runs the pure mutation over the in-memory
catalog and answers; Events go to a callback the service runs off the request path. TLS
material is loaded from PEM bytes into one SSLContext; :meth:`AdmissionServer.load` called
again swaps the certificate for new connections (a renewed Secret) without a restart.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import Counter, Histogram

from alnair_common import get_logger

from ._certificates import WebhookPki
from ._errors import ReviewError
from ._mutation import Lookup, PodMutation, mutate_pod
from ._pod_env import CacheEndpoint
from ._review import PodReview, parse_review, review_response

MAX_BODY_BYTES = 4 << 20  # a pod is at most ~1.5 MiB in etcd; its review a bit more
OUTCOMES = ("untouched", "mutated", "unchanged", "unknown-dataset", "invalid-annotation",
            "bad-request")
REVIEWS = Counter("alnair_admission_reviews_total",
                  "AdmissionReviews answered, by outcome.", ["outcome"])
for _outcome in OUTCOMES:
    REVIEWS.labels(_outcome)
REVIEW_SECONDS = Histogram("alnair_admission_review_seconds",
                           "Time to answer one AdmissionReview inside the webhook.",
                           buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5))
log = get_logger("alnair.admission-webhook")
Report = Callable[[PodReview, PodMutation], None]


def outcome(review: PodReview, mutation: PodMutation | None) -> str:
    if mutation is None or review.pod is None:
        return "untouched"
    if mutation.invalid:
        return "invalid-annotation"
    if mutation.unknown:
        return "unknown-dataset"
    return "mutated" if mutation.patch else ("unchanged" if mutation.datasets else "untouched")


class AdmissionServer:
    def __init__(self, lookup: Lookup, endpoint: CacheEndpoint, report: Report,
                 host: str, port: int, workdir: Path) -> None:
        self.lookup, self.endpoint, self.report = lookup, endpoint, report
        self.host, self.port = host, port
        self.workdir = workdir
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._runner: web.AppRunner | None = None

    def load(self, pki: WebhookPki) -> None:
        """Serve ``pki``'s certificate from the next handshake on. ``ssl`` reads keys from
        files only: they are written to a private directory and removed at once."""
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.TemporaryDirectory(dir=self.workdir) as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(pki.cert)
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(pki.key)
            self.context.load_cert_chain(cert, key)

    async def start(self) -> int:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/mutate", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.context)
        await site.start()
        sockets = site._server.sockets if site._server else []  # noqa: SLF001 - the bound port
        self.port = sockets[0].getsockname()[1] if sockets else self.port
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            body, result = self.answer(await request.read())
        except ReviewError as e:
            REVIEWS.labels("bad-request").inc()
            log.warning("bad admission request", error=str(e), peer=request.remote)
            return web.Response(status=400, text=str(e))
        REVIEWS.labels(result).inc()
        REVIEW_SECONDS.observe(time.perf_counter() - started)
        return web.Response(body=body, content_type="application/json")

    def answer(self, body: bytes) -> tuple[bytes, str]:
        """The response body for a request body, and its outcome (ReviewError if bad)."""
        review = parse_review(body)
        if review.pod is None:
            return review_response(review.uid), "untouched"
        mutation = mutate_pod(review.pod, review.namespace, self.lookup, self.endpoint)
        if (mutation.invalid or mutation.unknown) and not review.dry_run:
            self.report(review, mutation)
        return review_response(review.uid, mutation), outcome(review, mutation)
