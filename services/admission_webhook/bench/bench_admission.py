"""Benchmark: admission latency of the webhook, directly and through the real API server.

Goal (issue #17): <= 10 ms p99 on loopback. Starts etcd + kube-apiserver and a nats-server
on loopback (the test harness's binaries, ``scripts/testbin``), the webhook as its own
process (``python -m alnair_admission_webhook``, as the Deployment runs it), registers a
MutatingWebhookConfiguration with ``clientConfig.url`` and its CA, then measures:

* direct: POST /mutate over one keep-alive TLS connection (an annotated pod with two data
  sets and a sidecar, and a plain pod), client-side wall time per review;
* through the API server: pod creates with ``dryRun=All`` (admission runs, nothing is
  stored), with the webhook registered and without it; the difference is what the webhook
  adds to a pod create. The API server's own histogram of the webhook call
  (``apiserver_admission_webhook_admission_duration_seconds``) is printed beside it.

    ALNAIR_TESTBIN=$(scripts/testbin | tail -1) .venv/bin/python \\
        services/admission_webhook/bench/bench_admission.py --reviews 2000 --creates 500
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from alnair.v1 import cache_pb2
from alnair_admission_webhook import AdmissionServer, CacheEndpoint, DatasetCatalog
from alnair_common import Bus, TypedKV, subjects
from alnair_common.natsd import NatsServer, free_port
from alnair_common.testing.kube import start_kube_plane
from alnair_common.testing.testbin import locate

NS = "bench"
CONFIG = "alnair-bench-webhook"


def review(pod: dict[str, Any], i: int) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"u-{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
        "namespace": NS, "object": pod}}).encode()


def pod(name: str, annotated: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotated:
        meta["annotations"] = {"ai.centaurus.io/dataset": "imagenet,coco"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [
        {"name": "train", "image": "trainer:1", "env": [{"name": "EPOCHS", "value": "3"}]},
        {"name": "sidecar", "image": "sidecar:1"}]}}


async def _known(url: str, names: tuple[str, ...]) -> None:
    """The data sets as the hydrator reports them (the normal case: pods name data sets
    that exist; an unknown one would add a Warning Event per pod)."""
    bus = await Bus.connect(url, service="cache-hydrator")
    kv = await TypedKV.open(bus, subjects.CACHE_DATASETS_BUCKET, cache_pb2.CacheDatasetStatus)
    for name in names:
        spec = cache_pb2.CacheDatasetSpec(name=name, namespace=NS, source=f"s3://{name}/")
        await kv.put(f"{NS}.{name}", cache_pb2.CacheDatasetStatus(
            dataset=name, namespace=NS, source=spec.source, phase=cache_pb2.CACHE_PHASE_READY, spec=spec))
    await bus.drain()


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3  # noqa: E731
    return {"n": len(ordered), "p50_ms": round(at(0.50), 3), "p99_ms": round(at(0.99), 3),
            "max_ms": round(ordered[-1] * 1e3, 3), "mean_ms": round(statistics.fmean(ordered) * 1e3, 3)}


def timed(call: Any, n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - start)
    return out


def in_process(n: int) -> dict[str, Any]:
    """The handler's own work per review (parse, mutate, answer), no network: what the
    webhook's CPU costs per pod create."""
    catalog = DatasetCatalog()
    for name in ("imagenet", "coco"):
        catalog.apply(f"{NS}.{name}", cache_pb2.CacheDatasetStatus(
            dataset=name, namespace=NS, source=f"s3://{name}/", phase=cache_pb2.CACHE_PHASE_READY))
    server = AdmissionServer(catalog.lookup, CacheEndpoint("redis://cache:6379/0"), lambda r, m: None,
                             "127.0.0.1", 0, Path(tempfile.mkdtemp()))
    out = {}
    for label, annotated in (("in_process_annotated", True), ("in_process_plain", False)):
        bodies = [review(pod(f"p-{i}", annotated), i) for i in range(n)]
        out[label] = percentiles(timed(lambda i, b=bodies: server.answer(b[i]), n))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--creates", type=int, default=500)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="alnair-aw-bench-"))
    testbin = locate()
    plane = start_kube_plane(testbin, work / "plane")
    nats = NatsServer(store_dir=work / "js", port=free_port(), log_file=work / "nats.log")
    nats.start()
    asyncio.run(_known(nats.url, ("imagenet", "coco")))
    port = free_port()
    tls = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
    tls.load_cert_chain(plane.pki.admin_cert, plane.pki.admin_key)
    api = httpx.Client(base_url=plane.server, verify=tls, timeout=30)
    webhook: subprocess.Popen[bytes] | None = None
    try:
        api.post("/api/v1/namespaces", json={"metadata": {"name": NS}}).raise_for_status()
        mwc = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
        api.post(mwc, json={"metadata": {"name": CONFIG}, "webhooks": [{
            "name": "datasets.admission.alnair.centaurus.io", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"]}],
            "failurePolicy": "Fail", "sideEffects": "NoneOnDryRun", "timeoutSeconds": 3,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}]}
        ).raise_for_status()
        env = {**os.environ, "ALNAIR_NATS_URL": nats.url, "ALNAIR_KUBECONFIG": str(plane.kubeconfig),
               "ALNAIR_LISTEN_PORT": str(port), "ALNAIR_WEBHOOK_NAMESPACE": NS,
               "ALNAIR_WEBHOOK_CONFIGURATION": CONFIG, "ALNAIR_TLS_EXTRA_NAMES": "127.0.0.1",
               "ALNAIR_POD_TIER_URL": "redis://cache:6379/0", "ALNAIR_DATA_DIR": str(work / "data"),
               "ALNAIR_LOG_LEVEL": "warning"}
        webhook = subprocess.Popen([sys.executable, "-m", "alnair_admission_webhook"], env=env,
                                   stdout=(work / "webhook.log").open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        bundle = None
        while bundle is None:
            if time.monotonic() > deadline or webhook.poll() is not None:
                raise SystemExit(f"the webhook did not start; see {work / 'webhook.log'}")
            hooks = api.get(f"{mwc}/{CONFIG}").json()["webhooks"]
            bundle = hooks[0]["clientConfig"].get("caBundle")
            time.sleep(0.2)
        ca = work / "webhook-ca.crt"
        ca.write_bytes(base64.b64decode(bundle))
        direct = httpx.Client(base_url=f"https://127.0.0.1:{port}", timeout=10,
                              verify=ssl.create_default_context(cafile=str(ca)))
        while True:  # the endpoint opens after the bundle is patched
            try:
                direct.post("/mutate", content=review(pod("warm", True), 0)).raise_for_status()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        results: dict[str, Any] = in_process(args.reviews)
        for label, annotated in (("direct_annotated", True), ("direct_plain", False)):
            body = pod("p", annotated)
            timed(lambda i, b=body: direct.post("/mutate", content=review(b, i)), 100)  # warm-up
            results[label] = percentiles(timed(
                lambda i, b=body: direct.post("/mutate", content=review(b, i)).raise_for_status(),
                args.reviews))

        def create(i: int, annotated: bool) -> None:
            api.post(f"/api/v1/namespaces/{NS}/pods", params={"dryRun": "All"},
                     json=pod(f"p-{i}", annotated)).raise_for_status()

        while True:  # the API server picks up the caBundle within a second or so
            try:
                create(0, True)
                break
            except httpx.HTTPStatusError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for label, annotated in (("apiserver_annotated", True), ("apiserver_plain", False)):
            timed(lambda i, a=annotated: create(i, a), 50)
            results[label] = percentiles(timed(lambda i, a=annotated: create(i, a), args.creates))
        metrics = api.get("/metrics").text
        api.delete(f"{mwc}/{CONFIG}").raise_for_status()
        time.sleep(2)  # the API server drops the webhook from its set
        timed(lambda i: create(i, True), 50)
        results["apiserver_no_webhook"] = percentiles(timed(lambda i: create(i, True), args.creates))
        results["apiserver_webhook_histogram"] = [
            line for line in metrics.splitlines()
            if line.startswith("apiserver_admission_webhook_admission_duration_seconds_bucket")
            and 'name="datasets.admission.alnair.centaurus.io"' in line and 'operation="CREATE"' in line]
        results["load_average"] = os.getloadavg()
        results["cpus"] = os.cpu_count()
        print(json.dumps(results, indent=2))
    finally:
        if webhook is not None:
            webhook.terminate()
            webhook.wait(15)
        nats.stop()
        plane.stop()


if __name__ == "__main__":
    main()
