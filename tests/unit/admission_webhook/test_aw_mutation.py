"""The pure mutation: what an annotated pod gets, what is left alone, what is reported."""

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
KNOWN = {("team-a", "imagenet"): KnownDataset("imagenet", NS, "s3://images/train", "ready"),
         ("team-a", "coco"): KnownDataset("coco", NS, "s3://coco/2017", "hydrating")}


def lookup(namespace: str, name: str) -> KnownDataset | None:
    return KNOWN.get((namespace, name))


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": NS}
    if annotations is not None:
        meta["annotations"] = annotations
    spec.setdefault("containers", [{"name": "main", "image": "trainer"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def marker(p: dict[str, Any]) -> dict[str, Any]:
    return json.loads(p["metadata"]["annotations"][DATASET_MUTATED])


def test_a_pod_without_dataset_annotations_gets_no_patch_at_all() -> None:
    for given in (None, {}, {"other": "x"}, {SEED_CACHE_DATASET: "no"}):
        m = mutate_pod(pod(given), NS, lookup, TIER)
        assert m.patch == [] and m.warnings == [] and not m.invalid, given


def test_one_data_set_gives_every_container_the_single_form_the_reader_reads() -> None:
    p = pod({DATASET: "imagenet"}, initContainers=[{"name": "fetch", "image": "x"}],
            containers=[{"name": "main", "image": "t", "env": [{"name": "EPOCHS", "value": "3"}]},
                        {"name": "sidecar", "image": "s"}])
    m = mutate_pod(p, NS, lookup, TIER)
    out = apply_patch(p, m.patch)
    want = {"ALNAIR_DATASET": "imagenet", "ALNAIR_DATASET_SOURCE": "s3://images/train",
            "ALNAIR_DATASET_NAMESPACE": NS, "ALNAIR_CACHE_TIER_URL": TIER.tier_url,
            "ALNAIR_CACHE_PREFIX": "alnair"}
    for container in out["spec"]["initContainers"] + out["spec"]["containers"]:
        assert {k: v for k, v in env_of(container).items() if k != "EPOCHS"} == want
    assert env_of(out["spec"]["containers"][0])["EPOCHS"] == "3"  # the user's env stays first
    assert out["spec"]["containers"][0]["env"][0] == {"name": "EPOCHS", "value": "3"}
    assert marker(out) == {"datasets": ["imagenet"], "containers": {
        "fetch": list(want), "main": list(want), "sidecar": list(want)}}
    described = dataset_environment(environ=env_of(out["spec"]["containers"][1]))
    assert (described.name, described.key, described.source) == (
        "imagenet", "team-a.imagenet", "s3://images/train")


def test_several_data_sets_use_the_per_data_set_form_and_the_reader_tells_them_apart() -> None:
    p = pod({DATASET: "imagenet, coco"})
    out = apply_patch(p, mutate_pod(p, NS, lookup, TIER).patch)
    env = env_of(out["spec"]["containers"][0])
    assert env["ALNAIR_DATASETS"] == "imagenet,coco"
    assert "ALNAIR_DATASET" not in env and "ALNAIR_DATASET_SOURCE" not in env
    assert env["ALNAIR_DATASET_IMAGENET_SOURCE"] == "s3://images/train"
    assert env["ALNAIR_DATASET_COCO_SOURCE"] == "s3://coco/2017"
    assert dataset_environment("coco", env).source == "s3://coco/2017"
    assert dataset_environment("coco", env).key == "team-a.coco"


def test_a_variable_the_container_sets_keeps_the_users_value_and_is_recorded_as_kept() -> None:
    p = pod({DATASET: "imagenet"}, containers=[{"name": "main", "image": "t", "env": [
        {"name": "ALNAIR_CACHE_TIER_URL", "value": "redis://mine:6379/0"}]}])
    out = apply_patch(p, mutate_pod(p, NS, lookup, TIER).patch)
    env = out["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env].count("ALNAIR_CACHE_TIER_URL") == 1
    assert env_of(out["spec"]["containers"][0])["ALNAIR_CACHE_TIER_URL"] == "redis://mine:6379/0"
    assert marker(out)["kept"] == {"main": ["ALNAIR_CACHE_TIER_URL"]}


def test_a_second_admission_of_the_mutated_pod_changes_nothing() -> None:
    p = pod({DATASET: "imagenet,coco"}, containers=[{"name": "a", "image": "x"},
                                                    {"name": "b", "image": "y", "env": []}])
    once = apply_patch(p, mutate_pod(p, NS, lookup, TIER).patch)
    again = mutate_pod(once, NS, lookup, TIER)
    assert again.patch == []


def test_a_container_added_after_the_first_pass_gets_the_environment_on_reinvocation() -> None:
    p = pod({DATASET: "imagenet"})
    once = apply_patch(p, mutate_pod(p, NS, lookup, TIER).patch)
    grown = copy.deepcopy(once)
    grown["spec"]["containers"].append({"name": "injected-proxy", "image": "proxy"})
    again = mutate_pod(grown, NS, lookup, TIER)
    twice = apply_patch(grown, again.patch)
    assert env_of(twice["spec"]["containers"][1])["ALNAIR_DATASET"] == "imagenet"
    assert twice["spec"]["containers"][0] == once["spec"]["containers"][0]
    assert set(marker(twice)["containers"]) == {"main", "injected-proxy"}
    assert any(op["op"] == "replace" for op in again.patch)


def test_an_unknown_data_set_is_left_out_reported_and_named_in_the_marker() -> None:
    p = pod({DATASET: "imagenet,missing-set"})
    m = mutate_pod(p, NS, lookup, TIER)
    out = apply_patch(p, m.patch)
    env = env_of(out["spec"]["containers"][0])
    assert env["ALNAIR_DATASET"] == "imagenet" and "missing-set" not in json.dumps(env)
    assert m.unknown == ["missing-set"]
    assert len(m.warnings) == 1 and "create a Dataset" in m.warnings[0]
    assert "'missing-set'" in m.warnings[0] and len(m.warnings[0]) <= 256
    assert marker(out)["unknown"] == ["missing-set"]


def test_only_unknown_data_sets_flag_the_pod_without_touching_its_containers() -> None:
    p = pod({DATASET: "nope"})
    m = mutate_pod(p, NS, lookup, TIER)
    out = apply_patch(p, m.patch)
    assert out["spec"] == p["spec"]
    assert marker(out) == {"datasets": [], "containers": {}, "unknown": ["nope"]}
    assert mutate_pod(out, NS, lookup, TIER).patch == []  # flagged once


def test_a_malformed_annotation_changes_nothing_and_says_why() -> None:
    for bad in ("", "Bad_Name", "a,,b"):
        m = mutate_pod(pod({DATASET: bad}), NS, lookup, TIER)
        assert m.patch == [] and m.invalid, bad
        assert m.warnings and "admitted without" in m.warnings[0]


def test_the_seed_form_names_each_host_path_and_points_mounting_containers_at_their_mount() -> None:
    volumes = [{"name": "images", "hostPath": {"path": "/mnt/images"}},
               {"name": "labels", "hostPath": {"path": "/mnt/labels"}}]
    p = pod({SEED_CACHE_DATASET: "yes"}, volumes=volumes, containers=[
        {"name": "main", "image": "t", "volumeMounts": [
            {"name": "images", "mountPath": "/data/images"},
            {"name": "labels", "mountPath": "/data/labels", "subPath": "v2"}]},
        {"name": "logger", "image": "l"}])
    out = apply_patch(p, mutate_pod(p, NS, lookup, TIER).patch)
    images, labels = host_path_name("/mnt/images"), host_path_name("/mnt/labels")
    main, logger = (env_of(c) for c in out["spec"]["containers"])
    assert main["ALNAIR_DATASETS"] == f"{images},{labels}"
    assert main[f"ALNAIR_DATASET_{images.upper().replace('-', '_')}_SOURCE"] == "file:///mnt/images"
    assert main[f"ALNAIR_DATASET_{images.upper().replace('-', '_')}_PATH"] == "/data/images"
    # a subPath mount shows part of the source, not its root: no PATH for it
    assert f"ALNAIR_DATASET_{labels.upper().replace('-', '_')}_PATH" not in main
    assert not any(k.endswith("_PATH") for k in logger)
    assert out["spec"]["volumes"] == volumes  # the hostPath stays: the source of misses
    assert dataset_environment(images, main).path == "/data/images"


def test_an_s3_endpoint_is_set_only_when_configured_and_a_source_is_s3() -> None:
    with_s3 = CacheEndpoint(TIER.tier_url, "alnair", "http://alluxio-proxy:39999")
    p = pod({DATASET: "imagenet"})
    env = env_of(apply_patch(p, mutate_pod(p, NS, lookup, with_s3).patch)["spec"]["containers"][0])
    assert env["AWS_ENDPOINT_URL_S3"] == "http://alluxio-proxy:39999"
    env = env_of(apply_patch(p, mutate_pod(p, NS, lookup, TIER).patch)["spec"]["containers"][0])
    assert "AWS_ENDPOINT_URL_S3" not in env
    seed = pod({SEED_CACHE_DATASET: "yes"}, volumes=[{"name": "d", "hostPath": {"path": "/d"}}])
    env = env_of(apply_patch(seed, mutate_pod(seed, NS, lookup, with_s3).patch)["spec"]["containers"][0])
    assert "AWS_ENDPOINT_URL_S3" not in env


def test_env_from_is_warned_about_since_the_webhook_cannot_see_it() -> None:
    p = pod({DATASET: "imagenet"}, containers=[
        {"name": "main", "image": "t", "envFrom": [{"configMapRef": {"name": "cfg"}}]}])
    m = mutate_pod(p, NS, lookup, TIER)
    assert any("envFrom" in w and "'main'" in w for w in m.warnings)


def test_with_a_reader_key_a_pod_gets_its_namespaces_tier_user_and_never_the_hydrators() -> None:
    from alnair_common.tier_readers import reader_url

    key = "r" * 32
    keyed = CacheEndpoint("redis-cluster://:admin-pw@redis-0:6379,redis-1:6379", "alnair",
                          reader_key=key)
    assert key not in repr(keyed)
    p = pod({DATASET: "imagenet"})
    env = env_of(apply_patch(p, mutate_pod(p, NS, lookup, keyed).patch)["spec"]["containers"][0])
    assert env["ALNAIR_CACHE_TIER_URL"] == reader_url(keyed.tier_url, key, NS)
    assert env["ALNAIR_CACHE_TIER_URL"].startswith("redis-cluster://alnair-reader-team-a:")
    assert "admin-pw" not in json.dumps(mutate_pod(p, NS, lookup, keyed).patch)
    # a tier without users (a node's directory) is handed as it is
    plain = CacheEndpoint("dir:///var/lib/alnair/cache", "alnair", reader_key=key)
    env = env_of(apply_patch(p, mutate_pod(p, NS, lookup, plain).patch)["spec"]["containers"][0])
    assert env["ALNAIR_CACHE_TIER_URL"] == "dir:///var/lib/alnair/cache"


GATEWAY = CacheEndpoint(TIER.tier_url, "alnair", s3_gateway_image="alnair/dataset-csi:1")


def test_s3_readers_get_the_gateway_sidecar_first_and_their_clients_point_at_it() -> None:
    p = pod({DATASET: "imagenet"}, initContainers=[{"name": "fetch", "image": "x"}], containers=[
        {"name": "main", "image": "t", "env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
         "envFrom": [{"secretRef": {"name": "s3-keys"}}]},
        {"name": "mine", "image": "m", "env": [{"name": "AWS_ENDPOINT_URL_S3", "value": "http://minio:9000"}]}])
    out = apply_patch(p, mutate_pod(p, NS, lookup, GATEWAY).patch)
    gateway, fetch = out["spec"]["initContainers"]
    assert gateway["name"] == "alnair-s3-gateway" and gateway["restartPolicy"] == "Always"
    assert gateway["command"][0] == "alnair-dataset-s3-gateway"
    g = env_of(gateway)
    assert g["ALNAIR_DATASET"] == "imagenet" and g["AWS_REGION"] == "eu-west-1"
    assert "AWS_ENDPOINT_URL_S3" not in g  # never pointed at itself
    assert gateway["envFrom"] == [{"secretRef": {"name": "s3-keys"}}]  # the code's S3 keys, for misses
    assert env_of(fetch)["AWS_ENDPOINT_URL_S3"] == env_of(out["spec"]["containers"][0])["AWS_ENDPOINT_URL_S3"] \
        == "http://127.0.0.1:9494"
    assert env_of(out["spec"]["containers"][1])["AWS_ENDPOINT_URL_S3"] == "http://minio:9000"  # kept
    assert "alnair-s3-gateway" in marker(out)["containers"]
    # admitted again (a reinvocation): nothing changes, the sidecar is not added twice
    assert mutate_pod(out, NS, lookup, GATEWAY).patch == []


def test_no_sidecar_without_an_s3_source_an_image_when_turned_off_or_with_an_operator_endpoint() -> None:
    local = {("team-a", "logs"): KnownDataset("logs", NS, "file:///nfs/logs", "ready")}
    p = pod({DATASET: "logs"})
    out = apply_patch(p, mutate_pod(p, NS, lambda n, d: local.get((n, d)), GATEWAY).patch)
    assert "initContainers" not in out["spec"] and "AWS_ENDPOINT_URL_S3" not in env_of(out["spec"]["containers"][0])
    s3 = pod({DATASET: "imagenet"})
    out = apply_patch(s3, mutate_pod(s3, NS, lookup, TIER).patch)
    assert "initContainers" not in out["spec"]
    off = pod({DATASET: "imagenet", "ai.centaurus.io/dataset-s3-gateway": "off"})
    out = apply_patch(off, mutate_pod(off, NS, lookup, GATEWAY).patch)
    assert "initContainers" not in out["spec"] and "AWS_ENDPOINT_URL_S3" not in env_of(out["spec"]["containers"][0])
    both = CacheEndpoint(TIER.tier_url, "alnair", "http://cache-s3:9000", s3_gateway_image="img")
    out = apply_patch(s3, mutate_pod(s3, NS, lookup, both).patch)
    assert "initContainers" not in out["spec"]
    assert env_of(out["spec"]["containers"][0])["AWS_ENDPOINT_URL_S3"] == "http://cache-s3:9000"
