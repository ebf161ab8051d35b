"""The transparent switch through the real API server: a seed pod's read-only mounts of a
hostPath are stored pointing at a dataset CSI volume beside it (the hostPath stays, unmounted),
its writable one as it was, and the API server takes the webhook's JSON patch (and the switched
pod again, on a second admission)."""

from __future__ import annotations

import json
from typing import Any

from conftest import Webhook, pod_manifest

from alnair_admission_webhook._csi_switch import cache_volume_name
from alnair_common.annotations import DATASET_MUTATED, SEED_CACHE_DATASET
from alnair_common.dataset_refs import host_path_name

MOUNTS = {
    "train": [{"name": "images", "mountPath": "/data", "readOnly": True},
              {"name": "scratch", "mountPath": "/scratch"}],
    "eval": [{"name": "images", "mountPath": "/eval/val", "subPath": "val", "readOnly": True}],
}
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def seed_pod(name: str) -> dict[str, Any]:
    return pod_manifest(
        name, {SEED_CACHE_DATASET: "yes"},
        volumes=[{"name": "images", "hostPath": {"path": "/mnt/images", "type": "Directory"}},
                 {"name": "scratch", "hostPath": {"path": "/mnt/scratch"}}],
        containers=[{"name": c, "image": "trainer:1", "volumeMounts": m} for c, m in MOUNTS.items()])


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"]["volumes"]}


async def test_a_seed_pods_read_only_host_path_is_stored_as_the_csi_volume(webhook: Webhook) -> None:
    await webhook.start()
    pod, warnings = await webhook.create_pod(seed_pod("switched"))
    stored = volumes(pod)
    cache = cache_volume_name("images")
    assert stored[cache] == {"name": cache, "csi": {
        "driver": "datasets.alnair.centaurus.io", "readOnly": True,
        "volumeAttributes": {"dataset": host_path_name("/mnt/images")}}}
    assert stored["images"]["hostPath"]["path"] == "/mnt/images"  # kept, unmounted
    assert stored["scratch"]["hostPath"]["path"] == "/mnt/scratch"  # written to: stays mounted
    assert "volume 'scratch' stays on the node's directory" in warnings
    assert "'train' mounts it writable" in warnings and "'images'" not in warnings
    for c in pod["spec"]["containers"]:  # the mounts the user wrote, subPath included, renamed
        want = [{**m, "name": cache} if m["name"] == "images" else m for m in MOUNTS[c["name"]]]
        assert [m for m in c["volumeMounts"] if m["name"] in stored] == want
    train = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    images, scratch = host_path_name("/mnt/images"), host_path_name("/mnt/scratch")
    assert train["ALNAIR_DATASETS"] == f"{images},{scratch}"
    assert train[f"ALNAIR_DATASET_{images.upper().replace('-', '_')}_PATH"] == "/data"
    marker = json.loads(pod["metadata"]["annotations"][DATASET_MUTATED])
    assert marker["switched"] == {"images": cache}

    # the stored pod, created again (a copy keeps the marker): admitted, and changed no further
    again = {"apiVersion": "v1", "kind": "Pod", "spec": pod["spec"],
             "metadata": {k: v for k, v in pod["metadata"].items() if k not in SERVER_SET}}
    again["metadata"]["name"] = "switched-again"
    copy, warnings = await webhook.create_pod(again)
    assert volumes(copy) == stored
    assert copy["metadata"]["annotations"][DATASET_MUTATED] == pod["metadata"]["annotations"][DATASET_MUTATED]
    assert [c["env"] for c in copy["spec"]["containers"]] == [c["env"] for c in pod["spec"]["containers"]]
    assert "has none" not in warnings and "'scratch'" in warnings
