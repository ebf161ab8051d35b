"""The transparent switch: a seed pod's mounts of a read-only hostPath volume point at a
dataset CSI volume beside it (the hostPath stays in the pod, unmounted); any other hostPath
stays mounted, with a warning naming it."""

from __future__ import annotations

import copy
import json
from typing import Any

from aw_patch import apply_patch

from alnair_admission_webhook import CacheEndpoint, KnownDataset, mutate_pod
from alnair_admission_webhook._csi_switch import cache_volume_name
from alnair_common.annotations import DATASET, DATASET_MUTATED, SEED_CACHE_DATASET
from alnair_common.dataset_refs import host_path_name
from alnair_dataset import dataset_environment

NS = "team-a"
TIER = CacheEndpoint("redis://cache.alnair-system:6379/0", "alnair")
SEED = {SEED_CACHE_DATASET: "yes"}


def lookup(namespace: str, name: str) -> KnownDataset | None:
    return None  # the seed form needs no bus: its source is the path


def pod(annotations: dict[str, str], volumes: list[dict[str, Any]],
        *containers: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train", "namespace": NS, "annotations": annotations},
            "spec": {"volumes": volumes, "containers": list(containers)}}


def host(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, **extra}}


def container(name: str, *mounts: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "image": "trainer", "volumeMounts": list(mounts)}


def mount(volume: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"name": volume, "mountPath": path, **extra}


def admitted(p: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    m = mutate_pod(p, NS, lookup, TIER)
    return apply_patch(p, m.patch), m.warnings


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in c.get("env", [])}


def csi(volume: str, path: str) -> dict[str, Any]:
    """The cache volume beside hostPath volume ``volume``."""
    return {"name": cache_volume_name(volume), "csi": {
        "driver": "datasets.alnair.centaurus.io", "readOnly": True,
        "volumeAttributes": {"dataset": host_path_name(path)}}}


def mounted(c: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["name"], m["mountPath"]) for m in c["volumeMounts"]]


def test_read_only_mounts_of_a_host_path_read_the_cache_volume_beside_it() -> None:
    p = pod(SEED, [host("images", "/mnt/images")],
            container("train", mount("images", "/data", readOnly=True)),
            container("eval", mount("images", "/eval-data", readOnly=True)))
    out, warnings = admitted(p)
    # the hostPath stays (the pod needs the same right to it as before); a cache volume beside it
    assert out["spec"]["volumes"] == [host("images", "/mnt/images"), csi("images", "/mnt/images")]
    assert out["spec"]["volumes"][1]["csi"] == {
        "driver": "datasets.alnair.centaurus.io", "readOnly": True,
        "volumeAttributes": {"dataset": host_path_name("/mnt/images")}}
    assert warnings == []
    cache = cache_volume_name("images")
    assert mounted(out["spec"]["containers"][0]) == [(cache, "/data")]
    assert mounted(out["spec"]["containers"][1]) == [(cache, "/eval-data")]
    assert all(m["readOnly"] for c in out["spec"]["containers"] for m in c["volumeMounts"])
    # the data client's environment is still there; its PATH is the mountPath, still valid
    train = env_of(out["spec"]["containers"][0])
    assert train["ALNAIR_DATASET"] == host_path_name("/mnt/images")
    assert train["ALNAIR_DATASET_SOURCE"] == "file:///mnt/images"
    assert dataset_environment(environ=train).path == "/data"
    assert env_of(out["spec"]["containers"][1])["ALNAIR_DATASET_PATH"] == "/eval-data"
    marker = json.loads(out["metadata"]["annotations"][DATASET_MUTATED])
    assert marker["switched"] == {"images": cache}


def test_a_long_volume_name_gets_a_cache_volume_name_kubernetes_accepts() -> None:
    name = "v" * 63
    p = pod(SEED, [host(name, "/mnt/x")], container("train", mount(name, "/x", readOnly=True)))
    out, _ = admitted(p)
    cache = out["spec"]["volumes"][1]["name"]
    assert len(cache) <= 63 and cache == cache_volume_name(name) != cache_volume_name("w" * 63)


def test_a_writable_mount_keeps_the_host_path_and_the_warning_names_the_volume() -> None:
    for writable in ({}, {"readOnly": False}):
        p = pod(SEED, [host("scratch", "/mnt/scratch")],
                container("train", mount("scratch", "/scratch", **writable)))
        out, warnings = admitted(p)
        assert out["spec"]["volumes"] == [host("scratch", "/mnt/scratch")], writable
        assert out["spec"]["containers"][0]["volumeMounts"] == p["spec"]["containers"][0]["volumeMounts"]
        assert len(warnings) == 1, warnings
        assert "'scratch'" in warnings[0] and "stays on the node's directory" in warnings[0]
        assert "'train' mounts it writable" in warnings[0] and "readOnly: true" in warnings[0]
        assert len(warnings[0]) <= 256
        assert "switched" not in json.loads(out["metadata"]["annotations"][DATASET_MUTATED])
        assert env_of(out["spec"]["containers"][0])["ALNAIR_DATASET_PATH"] == "/scratch"


def test_one_writable_container_keeps_the_volume_for_all_of_them() -> None:
    p = pod(SEED, [host("images", "/mnt/images")],
            container("reader", mount("images", "/data", readOnly=True)),
            container("writer", mount("images", "/data")))
    out, warnings = admitted(p)
    assert out["spec"]["volumes"] == p["spec"]["volumes"]
    assert [mounted(c) for c in out["spec"]["containers"]] == [[("images", "/data")]] * 2
    assert len(warnings) == 1 and "'images'" in warnings[0] and "'writer'" in warnings[0]
    # an init container counts as much as any other
    p["spec"]["containers"].pop()
    p["spec"]["initContainers"] = [container("fetch", mount("images", "/data"))]
    out, warnings = admitted(p)
    assert out["spec"]["volumes"] == p["spec"]["volumes"] and "'fetch'" in warnings[0]


def test_each_host_path_volume_is_decided_on_its_own() -> None:
    volumes = [host("images", "/mnt/images"), host("logs", "/var/log/train"),
               host("labels", "/mnt/labels", type="Directory"), host("unused", "/mnt/unused")]
    p = pod(SEED, volumes,
            container("train", mount("images", "/data/images", readOnly=True),
                      mount("logs", "/logs"), mount("labels", "/data/labels", readOnly=True)))
    out, warnings = admitted(p)
    assert out["spec"]["volumes"] == [*volumes, csi("images", "/mnt/images"),
                                      csi("labels", "/mnt/labels")]
    assert mounted(out["spec"]["containers"][0]) == [
        (cache_volume_name("images"), "/data/images"), ("logs", "/logs"),
        (cache_volume_name("labels"), "/data/labels")]
    assert len(warnings) == 2
    assert "'logs'" in warnings[0] and "writable" in warnings[0]
    assert "'unused'" in warnings[1] and "no container mounts it" in warnings[1]
    env = env_of(out["spec"]["containers"][0])  # every hostPath is still a data set, in order
    assert env["ALNAIR_DATASETS"] == ",".join(
        host_path_name(v["hostPath"]["path"]) for v in volumes)
    marker = json.loads(out["metadata"]["annotations"][DATASET_MUTATED])
    assert marker["switched"] == {"images": cache_volume_name("images"),
                                  "labels": cache_volume_name("labels")}


def test_a_host_path_that_is_not_a_directory_stays_with_a_warning() -> None:
    for kind in ("File", "DirectoryOrCreate", "Socket"):
        p = pod(SEED, [host("conf", "/etc/train.conf", type=kind)],
                container("train", mount("conf", "/conf", readOnly=True)))
        out, warnings = admitted(p)
        assert out["spec"]["volumes"] == p["spec"]["volumes"], kind
        assert len(warnings) == 1 and "'conf'" in warnings[0] and kind in warnings[0]


def test_sub_path_mounts_read_the_same_part_of_the_cache_volume() -> None:
    p = pod(SEED, [host("images", "/mnt/images")],
            container("train", mount("images", "/data/train", subPath="train", readOnly=True),
                      mount("images", "/data/val", subPathExpr="$(SPLIT)", readOnly=True)))
    out, warnings = admitted(p)
    assert out["spec"]["volumes"][1] == csi("images", "/mnt/images") and warnings == []
    cache = cache_volume_name("images")
    assert out["spec"]["containers"][0]["volumeMounts"] == [
        {**m, "name": cache} for m in p["spec"]["containers"][0]["volumeMounts"]]
    # a subPath shows a part of the data set, not its root: no PATH variable, as before
    assert "ALNAIR_DATASET_PATH" not in env_of(out["spec"]["containers"][0])


def test_a_second_admission_of_a_switched_pod_changes_nothing() -> None:
    p = pod(SEED, [host("images", "/mnt/images"), host("logs", "/var/log/train")],
            container("train", mount("images", "/data", readOnly=True), mount("logs", "/logs")))
    once, _ = admitted(p)
    again = mutate_pod(once, NS, lookup, TIER)
    assert again.patch == [] and not again.invalid
    assert len(again.warnings) == 1 and "'logs'" in again.warnings[0]  # still writable
    alone = pod(SEED, [host("images", "/mnt/images")],
                container("train", mount("images", "/data", readOnly=True)))
    switched, _ = admitted(alone)
    again = mutate_pod(switched, NS, lookup, TIER)
    assert (again.patch, again.warnings, again.invalid) == ([], [], "")


def test_a_container_added_on_reinvocation_reads_the_cache_volume_too() -> None:
    p = pod(SEED, [host("images", "/mnt/images")],
            container("train", mount("images", "/data", readOnly=True)))
    once, _ = admitted(p)
    grown = copy.deepcopy(once)
    grown["spec"]["containers"] += [container("sidecar", mount("images", "/side", readOnly=True))]
    m = mutate_pod(grown, NS, lookup, TIER)
    twice = apply_patch(grown, m.patch)
    assert twice["spec"]["volumes"] == once["spec"]["volumes"]  # no second cache volume
    assert mounted(twice["spec"]["containers"][1]) == [(cache_volume_name("images"), "/side")]
    sidecar = env_of(twice["spec"]["containers"][1])
    assert sidecar["ALNAIR_DATASET"] == host_path_name("/mnt/images")
    assert m.warnings == []


def test_a_pod_naming_data_sets_only_keeps_its_host_paths() -> None:
    volumes = [host("images", "/mnt/images")]
    p = pod({DATASET: host_path_name("/mnt/images")}, volumes,
            container("train", mount("images", "/data", readOnly=True)))
    known = KnownDataset(host_path_name("/mnt/images"), NS, "file:///mnt/images", "ready")
    m = mutate_pod(p, NS, lambda ns, name: known, TIER)
    out = apply_patch(p, m.patch)
    assert out["spec"]["volumes"] == volumes and m.warnings == []
    assert mounted(out["spec"]["containers"][0]) == [("images", "/data")]
    assert env_of(out["spec"]["containers"][0])["ALNAIR_DATASET"] == known.name
    no = pod({SEED_CACHE_DATASET: "no"}, volumes, container("train", mount("images", "/d", readOnly=True)))
    assert mutate_pod(no, NS, lookup, TIER).patch == []


def test_a_seed_pod_that_also_names_its_data_set_is_still_switched() -> None:
    name = host_path_name("/mnt/images")
    p = pod({**SEED, DATASET: name}, [host("images", "/mnt/images")],
            container("train", mount("images", "/data", readOnly=True)))
    out, _ = admitted(p)
    assert out["spec"]["volumes"][1] == csi("images", "/mnt/images")
