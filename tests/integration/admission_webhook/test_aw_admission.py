"""Pods created through the real API server, mutated by the webhook running on loopback."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from conftest import SECRET, TIER_URL, Webhook, pod_manifest, put_status
from kubernetes import client as k8s

from alnair_common.annotations import DATASET, DATASET_MUTATED, SEED_CACHE_DATASET
from alnair_common.testing import wait_for

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "admission_webhook"
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def golden(name: str, actual: Any, namespace: str) -> None:
    """Compare with tests/data/admission_webhook/<name>.json (the namespace written as
    <namespace>); ALNAIR_UPDATE_GOLDEN=1 rewrites the file instead."""
    text = json.dumps(actual, indent=2, sort_keys=True).replace(namespace, "<namespace>") + "\n"
    path = GOLDEN / f"{name}.json"
    if os.environ.get("ALNAIR_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs:\n{text}"


def documented_part(pod: dict[str, Any]) -> dict[str, Any]:
    """What the webhook may change: annotations and each container's env; plus volumes."""
    spec = pod["spec"]
    return {"annotations": pod["metadata"].get("annotations", {}),
            "initContainers": {c["name"]: c.get("env", []) for c in spec.get("initContainers", [])},
            "containers": {c["name"]: c.get("env", []) for c in spec["containers"]},
            "volumes": spec.get("volumes", [])}


def stripped(pod: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in pod["metadata"].items() if k not in SERVER_FIELDS and k != "name"}
    meta["labels"] = {k: v for k, v in meta.get("labels", {}).items()
                      if k != "alnair.centaurus.io/admission"}
    return {**pod, "metadata": meta}


async def test_an_annotated_pod_is_mutated_exactly_as_documented(webhook: Webhook) -> None:
    ns = webhook.kube.namespace
    await put_status(webhook.nats, ns, "imagenet", "s3://images/train")
    await webhook.start()
    pod, _ = await webhook.create_pod(pod_manifest(
        "one-dataset", {DATASET: "imagenet"},
        initContainers=[{"name": "fetch", "image": "busybox"}],
        containers=[{"name": "train", "image": "trainer:1", "env": [
            {"name": "EPOCHS", "value": "3"},
            {"name": "ALNAIR_CACHE_PREFIX", "value": "mine"}]}]))
    golden("one_dataset", documented_part(pod), ns)
    train = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert train["ALNAIR_CACHE_PREFIX"] == "mine"  # the user's value wins
    assert train["ALNAIR_CACHE_TIER_URL"] == TIER_URL


async def test_a_pod_without_the_annotations_is_stored_byte_identical(webhook: Webhook) -> None:
    service = await webhook.start()
    spec = {"containers": [{"name": "train", "image": "trainer:1", "env": [{"name": "A", "value": "1"}]}],
            "volumes": [{"name": "d", "hostPath": {"path": "/mnt/data"}}]}
    reviewed = pod_manifest("plain", {"team": "a"}, **spec)
    skipped = pod_manifest("skipped", {"team": "a"}, **spec)
    skipped["metadata"]["labels"] = {"alnair.centaurus.io/admission": "skip"}  # not sent to it
    before = _answered(service)
    through, _ = await webhook.create_pod(reviewed)
    assert _answered(service) == before + 1, "the webhook was not asked about the pod"
    alone, _ = await webhook.create_pod(skipped)
    assert json.dumps(stripped(through), sort_keys=True) == json.dumps(stripped(alone), sort_keys=True)
    assert DATASET_MUTATED not in through["metadata"].get("annotations", {})


async def test_two_data_sets_a_sidecar_and_a_seed_volume(webhook: Webhook) -> None:
    ns = webhook.kube.namespace
    await put_status(webhook.nats, ns, "imagenet", "s3://images/train")
    await put_status(webhook.nats, ns, "coco", "s3://coco/2017")
    await webhook.start()
    pod, _ = await webhook.create_pod(pod_manifest(
        "two-datasets", {DATASET: "imagenet,coco"},
        containers=[{"name": "train", "image": "trainer:1"},
                    {"name": "metrics-sidecar", "image": "sidecar:1", "env": [{"name": "X", "value": "y"}]}]))
    golden("two_datasets_sidecar", documented_part(pod), ns)
    seed, _ = await webhook.create_pod(pod_manifest(
        "seed-form", {SEED_CACHE_DATASET: "yes"},
        volumes=[{"name": "data", "hostPath": {"path": "/mnt/imagenet"}}],
        containers=[{"name": "train", "image": "trainer:1",
                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]))
    golden("seed_hostpath", documented_part(seed), ns)


async def test_an_unknown_data_set_is_admitted_with_a_warning_and_an_event(webhook: Webhook) -> None:
    ns = webhook.kube.namespace
    await webhook.start()
    pod, warnings = await webhook.create_pod(pod_manifest("unknown", {DATASET: "no-such-set"}))
    assert "data set 'no-such-set' is not known" in warnings and "create a Dataset" in warnings
    assert "env" not in pod["spec"]["containers"][0]
    assert json.loads(pod["metadata"]["annotations"][DATASET_MUTATED])["unknown"] == ["no-such-set"]
    event = await wait_for(lambda: _event(webhook, "unknown"), timeout=15, what="a Warning Event")
    assert event.type == "Warning" and event.reason == "DatasetCacheSkipped"
    assert "create a Dataset (alnair.centaurus.io/v1) named no-such-set" in event.message
    assert event.involved_object.kind == "Pod" and event.involved_object.namespace == ns


async def test_a_malformed_annotation_is_admitted_with_a_warning_and_an_event(webhook: Webhook) -> None:
    await webhook.start()
    pod, warnings = await webhook.create_pod(pod_manifest("malformed", {DATASET: "Not_A_Name"}))
    assert "'Not_A_Name' is not valid" in warnings and "admitted without" in warnings
    assert DATASET_MUTATED not in pod["metadata"]["annotations"]
    assert "env" not in pod["spec"]["containers"][0]
    event = await wait_for(lambda: _event(webhook, "malformed"), timeout=15, what="a Warning Event")
    assert "'Not_A_Name' is not valid" in event.message


async def test_a_dry_run_records_no_event(webhook: Webhook) -> None:
    await webhook.start()
    await webhook.create_pod(pod_manifest("first", {DATASET: "absent"}))  # the webhook is called
    dry = pod_manifest("dry", {DATASET: "absent"})
    stored = await asyncio.to_thread(webhook.kube.core.create_namespaced_pod, webhook.kube.namespace,
                                     dry, dry_run="All")
    assert DATASET_MUTATED in stored.metadata.annotations  # it was mutated, as a dry run shows
    await webhook.create_pod(pod_manifest("last", {DATASET: "absent"}))
    await wait_for(lambda: _event(webhook, "last"), timeout=15, what="the real create's Event")
    assert await _event(webhook, "dry") is None


async def test_a_restarted_webhook_keeps_serving_with_the_same_ca(webhook: Webhook) -> None:
    ns = webhook.kube.namespace
    await put_status(webhook.nats, ns, "imagenet", "s3://images/train")
    first = await webhook.start()
    assert first.loaded is not None and first.loaded.action == "created"
    ca = _secret(webhook)["ca.crt"]
    bundle = webhook.registered()["webhooks"][0]["clientConfig"]["caBundle"]
    await webhook.create_pod(pod_manifest("before", {DATASET: "imagenet"}))
    await webhook.stop(first)
    second = await webhook.start()
    assert second.loaded is not None and second.loaded.action == "reused"
    pod, _ = await webhook.create_pod(pod_manifest("after", {DATASET: "imagenet"}), timeout=5)
    assert {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}["ALNAIR_DATASET"] == "imagenet"
    assert _secret(webhook)["ca.crt"] == ca
    assert webhook.registered()["webhooks"][0]["clientConfig"]["caBundle"] == bundle


def _answered(service: Any) -> float:
    from alnair_admission_webhook._server import REVIEWS

    return sum(REVIEWS.labels(o)._value.get() for o in ("untouched", "mutated", "unchanged",
                                                         "unknown-dataset", "invalid-annotation"))


async def _event(webhook: Webhook, pod: str) -> k8s.CoreV1Event | None:
    events = webhook.kube.core.list_namespaced_event(
        webhook.kube.namespace, field_selector=f"involvedObject.name={pod}").items
    return next((e for e in events if e.reason == "DatasetCacheSkipped"), None)


def _secret(webhook: Webhook) -> dict[str, str]:
    return webhook.kube.core.read_namespaced_secret(SECRET, webhook.kube.namespace).data


async def test_a_generated_pods_event_goes_on_its_controlling_owner(webhook: Webhook) -> None:
    """A ReplicaSet's pod has no name at mutating admission (generateName is resolved
    after it): its Event is recorded on the ReplicaSet, where `kubectl describe` shows it."""
    await webhook.start()
    manifest = pod_manifest("unused", {DATASET: "no-such-set"})
    del manifest["metadata"]["name"]
    manifest["metadata"]["generateName"] = "train-7d9f-"
    manifest["metadata"]["ownerReferences"] = [{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9f", "controller": True,
        "uid": "0b6f2b1e-5a86-4d47-9d55-3c1d7c1b2a10"}]
    await webhook.create_pod(manifest)
    event = await wait_for(lambda: _event(webhook, "train-7d9f"), timeout=15, what="an Event on the ReplicaSet")
    assert (event.involved_object.kind, event.involved_object.uid) == (
        "ReplicaSet", "0b6f2b1e-5a86-4d47-9d55-3c1d7c1b2a10")
    assert event.message.startswith("pod train-7d9f-…: ") and "no-such-set" in event.message


async def test_with_the_bus_away_the_webhook_stays_ready_and_answers_from_its_copy(webhook: Webhook) -> None:
    ns = webhook.kube.namespace
    await put_status(webhook.nats, ns, "imagenet", "s3://images/train")
    service = await webhook.start()
    await webhook.nats.close_all()
    webhook.nats.server.stop()
    await wait_for(lambda: _bus_down(service), timeout=15, what="the webhook sees the bus gone")
    pod, _ = await webhook.create_pod(pod_manifest("bus-away", {DATASET: "imagenet"}), timeout=5)
    assert pod["spec"]["containers"][0]["env"][0] == {"name": "ALNAIR_DATASET", "value": "imagenet"}
    assert (await service.health.report()).ready
    # Back, so the service's shutdown can drain (alnair_common's Bus.drain raises
    # ConnectionResetError when the connection is lost at that moment).
    webhook.nats.server.start()
    await wait_for(lambda: _bus_up(service), timeout=30, what="the webhook reconnected")


async def _bus_up(service: Any) -> bool:
    return service.bus is not None and service.bus.connected


async def _bus_down(service: Any) -> bool:
    return service.bus is not None and not service.bus.connected
