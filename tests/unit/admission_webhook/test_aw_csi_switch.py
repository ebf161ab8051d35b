"""The transparent switch: a seed pod's read-only hostPath volumes become the dataset CSI
driver's volumes of the same name; any other hostPath stays, with a warning naming it."""

from __future__ import annotations

import copy
import json
from typing import Any

from aw_patch import apply_patch

from alnair_admission_webhook import CacheEndpoint, KnownDataset, mutate_pod
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


def csi(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "csi": {"driver": "datasets.alnair.centaurus.io", "readOnly": True,
                                  "volumeAttributes": {"dataset": host_path_name(path)}}}


def test_a_volume_every_container_mounts_read_only_is_switched_to_the_csi_driver() -> None:
    p = pod(SEED, [host("images", "/mnt/images")],
            container("train", mount("images", "/data", readOnly=True)),
            container("eval", mount("images", "/eval-data", readOnly=True)))
    out, warnings = admitted(p)
    assert out["spec"]["volumes"] == [csi("images", "/mnt/images")]
    assert out["spec"]["volumes"][0] == {"name": "images", "csi": {
        "driver": "datasets.alnair.centaurus.io", "readOnly": True,
        "volumeAttributes": {"dataset": host_path_name("/mnt/images")}}}
    assert warnings == []
    for before, after in zip(p["spec"]["containers"], out["spec"]["containers"], strict=True):
        assert after["volumeMounts"] == before["volumeMounts"]  # the user's mounts are untouched
    # the data client's environment is still there; its PATH is the mountPath, still valid
    train = env_of(out["spec"]["containers"][0])
    assert train["ALNAIR_DATASET"] == host_path_name("/mnt/images")
    assert train["ALNAIR_DATASET_SOURCE"] == "file:///mnt/images"
    assert dataset_environment(environ=train).path == "/data"
    assert env_of(out["spec"]["containers"][1])["ALNAIR_DATASET_PATH"] == "/eval-data"
    marker = json.loads(out["metadata"]["annotations"][DATASET_MUTATED])
    assert marker["switched"] == {"images": "/mnt/images"}


def test_a_writable_mount_keeps_the_host_path_and_the_warning_names_the_volume() -> None:
    for writable in ({}, {"readOnly": False}):
        p = pod(SEED, [host("scratch", "/mnt/scratch")],
                container("train", mount("scratch", "/scratch", **writable)))
        out, warnings = admitted(p)
        assert out["spec"]["volumes"] == [host("scratch", "/mnt/scratch")], writable
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
    assert out["spec"]["volumes"] == [csi("images", "/mnt/images"), host("logs", "/var/log/train"),
                                      csi("labels", "/mnt/labels"), host("unused", "/mnt/unused")]
    assert len(warnings) == 2
    assert "'logs'" in warnings[0] and "writable" in warnings[0]
    assert "'unused'" in warnings[1] and "no container mounts it" in warnings[1]
    env = env_of(out["spec"]["containers"][0])  # every hostPath is still a data set, in order
    assert env["ALNAIR_DATASETS"] == ",".join(
        host_path_name(v["hostPath"]["path"]) for v in volumes)
    marker = json.loads(out["metadata"]["annotations"][DATASET_MUTATED])
    assert marker["switched"] == {"images": "/mnt/images", "labels": "/mnt/labels"}


def test_a_host_path_that_is_not_a_directory_stays_with_a_warning() -> None:
    for kind in ("File", "DirectoryOrCreate", "Socket"):
        p = pod(SEED, [host("conf", "/etc/train.conf", type=kind)],
                container("train", mount("conf", "/conf", readOnly=True)))
        out, warnings = admitted(p)
        assert out["spec"]["volumes"] == p["spec"]["volumes"], kind
        assert len(warnings) == 1 and "'conf'" in warnings[0] and kind in warnings[0]


def test_sub_path_mounts_see_the_switched_volume_unchanged() -> None:
    p = pod(SEED, [host("images", "/mnt/images")],
            container("train", mount("images", "/data/train", subPath="train", readOnly=True),
                      mount("images", "/data/val", subPathExpr="$(SPLIT)", readOnly=True)))
    out, warnings = admitted(p)
    assert out["spec"]["volumes"] == [csi("images", "/mnt/images")] and warnings == []
    assert out["spec"]["containers"][0]["volumeMounts"] == p["spec"]["containers"][0]["volumeMounts"]
    # a subPath shows a part of the data set, not its root: no PATH variable, as before
    assert "ALNAIR_DATASET_PATH" not in env_of(out["spec"]["containers"][0])


def test_a_second_admission_of_a_switched_pod_changes_nothing() -> None:
    p = pod(SEED, [host("images", "/mnt/images"), host("logs", "/var/log/train")],
            container("train", mount("images", "/data", readOnly=True), mount("logs", "/logs")))
    once, _ = admitted(p)
    assert once["spec"]["volumes"][0] == csi("images", "/mnt/images")
    again = mutate_pod(once, NS, lookup, TIER)
    assert again.patch == [] and not again.invalid
    # only the writable volume is warned about again: the switched one is not a hostPath now
    assert len(again.warnings) == 1 and "'logs'" in again.warnings[0]
    # with every hostPath switched, the pod still names its data set (no "has none" error)
    alone = pod(SEED, [host("images", "/mnt/images")],
                container("train", mount("images", "/data", readOnly=True)))
    switched, _ = admitted(alone)
    assert not any("hostPath" in v for v in switched["spec"]["volumes"])
    again = mutate_pod(switched, NS, lookup, TIER)
    assert (again.patch, again.warnings, again.invalid) == ([], [], "")


def test_a_container_added_on_reinvocation_reads_the_switched_volume() -> None:
    p = pod(SEED, [host("images", "/mnt/images")],
            container("train", mount("images", "/data", readOnly=True)))
    once, _ = admitted(p)
    grown = copy.deepcopy(once)
    grown["spec"]["containers"] += [container("sidecar", mount("images", "/side", readOnly=True)),
                                    container("writer", mount("images", "/w"))]
    m = mutate_pod(grown, NS, lookup, TIER)
    twice = apply_patch(grown, m.patch)
    assert twice["spec"]["volumes"] == once["spec"]["volumes"]
    sidecar = env_of(twice["spec"]["containers"][1])
    assert sidecar["ALNAIR_DATASET"] == host_path_name("/mnt/images")
    assert sidecar["ALNAIR_DATASET_PATH"] == "/side"
    assert len(m.warnings) == 1 and "'writer'" in m.warnings[0] and "writes fail" in m.warnings[0]


def test_a_pod_naming_data_sets_only_keeps_its_host_paths() -> None:
    volumes = [host("images", "/mnt/images")]
    p = pod({DATASET: host_path_name("/mnt/images")}, volumes,
            container("train", mount("images", "/data", readOnly=True)))
    known = KnownDataset(host_path_name("/mnt/images"), NS, "file:///mnt/images", "ready")
    m = mutate_pod(p, NS, lambda ns, name: known, TIER)
    out = apply_patch(p, m.patch)
    assert out["spec"]["volumes"] == volumes and m.warnings == []
    assert env_of(out["spec"]["containers"][0])["ALNAIR_DATASET"] == known.name
    no = pod({SEED_CACHE_DATASET: "no"}, volumes, container("train", mount("images", "/d", readOnly=True)))
    assert mutate_pod(no, NS, lookup, TIER).patch == []


def test_a_seed_pod_that_also_names_its_data_set_is_still_switched() -> None:
    name = host_path_name("/mnt/images")
    p = pod({**SEED, DATASET: name}, [host("images", "/mnt/images")],
            container("train", mount("images", "/data", readOnly=True)))
    out, _ = admitted(p)
    assert out["spec"]["volumes"] == [csi("images", "/mnt/images")]
