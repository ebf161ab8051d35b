"""The environment the webhook gives a pod is enough for unchanged code to read through the
cache: the container's env, taken from the pod the real API server stored, handed to
``DatasetReader()`` (no arguments) against a real redis-server tier."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
from conftest import Webhook, pod_manifest, put_status

from alnair_common.annotations import DATASET, SEED_CACHE_DATASET
from alnair_common.dataset_refs import host_path_name
from alnair_common.natsd import free_port
from alnair_common.testing.redis import RedisDatabase
from alnair_dataset import Budget, DatasetReader, open_source, open_tier, store_file

FILES = {f"part-{i}.bin": os.urandom(3000 + i) for i in range(4)}


def write_source(root: Path) -> None:
    root.mkdir(parents=True)
    for name, data in FILES.items():
        (root / name).write_bytes(data)


def hydrate(url: str, prefix: str, key: str, uri: str, files: int) -> None:
    """The first ``files`` files in the tier as the hydrator stores them (key ``ns.name``)."""
    tier = open_tier(url, prefix=prefix, budget_bytes=1 << 30)
    source = open_source(uri)
    tier.set_meta(key, {"source": uri, "include": "[]", "exclude": "[]", "phase": "hydrating",
                        "budget_bytes": str(1 << 30)})
    for f in source.list()[:files]:
        store_file(tier, key, source, f, Budget(tier))
    tier.close()


def container_env(pod: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("ALNAIR_")]:
        monkeypatch.delenv(key)
    for var in pod["spec"]["containers"][0]["env"]:
        monkeypatch.setenv(var["name"], var["value"])


def read_all(reader: DatasetReader) -> dict[str, bytes]:
    return {path: reader.read(path) for path in reader.files()}


async def test_an_alnair_annotated_pod_reads_hits_from_the_tier_and_misses_from_the_source(
        webhook: Webhook, redis: RedisDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = webhook.kube.namespace
    write_source(tmp_path / "shared" / "imagenet")
    uri = f"file://{tmp_path / 'shared' / 'imagenet'}"
    hydrate(redis.url, redis.prefix, f"{ns}.imagenet", uri, files=2)
    await put_status(webhook.nats, ns, "imagenet", uri)
    webhook.overrides = {"pod_tier_url": redis.url, "pod_cache_prefix": redis.prefix}
    await webhook.start()
    pod, _ = await webhook.create_pod(pod_manifest("reader", {DATASET: "imagenet"}))
    container_env(pod, monkeypatch)
    with DatasetReader(write_back=False) as reader:
        assert read_all(reader) == FILES
        assert (reader.stats.hits, reader.stats.misses) == (2, 2)


async def test_a_seed_pod_reads_misses_where_its_container_mounts_the_host_path(
        webhook: Webhook, redis: RedisDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hydrator read the node's path; the container sees the same files at its
    mountPath (a copy with the same sizes and mtimes stands in for the bind mount, which
    needs privileges this machine does not give). The node's path is gone for the reader."""
    ns = webhook.kube.namespace
    node, mounted = tmp_path / "node" / "mnt" / "images", tmp_path / "container" / "data"
    write_source(node)
    name = host_path_name(str(node))
    hydrate(redis.url, redis.prefix, f"{ns}.{name}", f"file://{node}", files=1)
    mounted.parent.mkdir(parents=True)
    shutil.copytree(node, mounted, copy_function=shutil.copy2)
    shutil.rmtree(node)
    webhook.overrides = {"pod_tier_url": redis.url, "pod_cache_prefix": redis.prefix}
    await webhook.start()
    pod, _ = await webhook.create_pod(pod_manifest(
        "seed-reader", {SEED_CACHE_DATASET: "yes"},
        volumes=[{"name": "images", "hostPath": {"path": str(node)}}],
        containers=[{"name": "train", "image": "trainer:1",
                     "volumeMounts": [{"name": "images", "mountPath": str(mounted)}]}]))
    container_env(pod, monkeypatch)
    with DatasetReader(write_back=False) as reader:
        assert reader.name == name and reader.key == f"{ns}.{name}"
        assert read_all(reader) == FILES
        assert (reader.stats.hits, reader.stats.misses) == (1, 3)


async def test_a_pod_reads_through_its_namespaces_read_only_user_and_writes_nothing(
        webhook: Webhook, redis: RedisDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a reader key the pod's URL names its namespace's tier user (made here as the
    hydrator makes it): unchanged code, write-back on by default, reads hits from the tier
    and misses from the source, and its write-backs are refused without a tier error."""
    from alnair_common.tier_readers import reader_password, reader_user

    key = "webhook-and-hydrator-share-this-key"
    ns = webhook.kube.namespace
    write_source(tmp_path / "shared" / "imagenet")
    uri = f"file://{tmp_path / 'shared' / 'imagenet'}"
    hydrate(redis.url, redis.prefix, f"{ns}.imagenet", uri, files=2)
    admin = open_tier(redis.url, prefix=redis.prefix, budget_bytes=1 << 30)
    admin.grant_reader(ns, reader_user(ns), reader_password(key, ns))
    await put_status(webhook.nats, ns, "imagenet", uri)
    webhook.overrides = {"pod_tier_url": redis.url, "pod_cache_prefix": redis.prefix,
                         "cache_reader_key": key}
    await webhook.start()
    try:
        pod, _ = await webhook.create_pod(pod_manifest("reader", {DATASET: "imagenet"}))
        container_env(pod, monkeypatch)
        assert os.environ["ALNAIR_CACHE_TIER_URL"].startswith(f"redis://{reader_user(ns)}:")
        with DatasetReader() as reader:
            assert read_all(reader) == FILES
            reader.flush(timeout=10)
            assert (reader.stats.hits, reader.stats.misses) == (2, 2)
            assert reader.stats.written_back == 0 and reader.stats.tier_errors == 0
        assert len(admin.manifest(f"{ns}.imagenet")) == 2
    finally:
        admin.revoke_reader(reader_user(ns))
        admin.close()


async def test_unchanged_boto3_code_reads_an_s3_data_set_through_the_gateway_sidecar(
        webhook: Webhook, redis: RedisDatabase, s3_server, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod the API server stored runs as the kubelet would run it, on this machine: the
    sidecar's command and env (its port swapped for a free one, its envFrom secret's S3 keys
    as environment), then the training container's env for plain boto3 code, which names no
    endpoint: every object of the data set comes back equal, and the two not yet cached are
    written back to the tier by the gateway."""
    ns = webhook.kube.namespace
    bucket = s3_server.make_bucket()
    for name, data in FILES.items():
        s3_server.client().put_object(Bucket=bucket, Key=f"imagenet/{name}", Body=data)
    uri = f"s3://{bucket}/imagenet"
    source_env = {"AWS_ENDPOINT_URL_S3": s3_server.endpoint, "AWS_ACCESS_KEY_ID": s3_server.access_key,
                  "AWS_SECRET_ACCESS_KEY": s3_server.secret_key}
    with monkeypatch.context() as m:  # the hydrator's view of the source
        for k, v in source_env.items():
            m.setenv(k, v)
        hydrate(redis.url, redis.prefix, f"{ns}.imagenet", uri, files=2)
    await put_status(webhook.nats, ns, "imagenet", uri)
    webhook.overrides = {"pod_tier_url": redis.url, "pod_cache_prefix": redis.prefix,
                         "pod_s3_gateway_image": "alnair/dataset-csi:test"}
    await webhook.start()
    pod, _ = await webhook.create_pod(pod_manifest("s3-reader", {DATASET: "imagenet"}, containers=[
        {"name": "train", "image": "trainer:1", "env": [{"name": "AWS_DEFAULT_REGION", "value": "us-east-1"}],
         "envFrom": [{"secretRef": {"name": "s3-keys"}}]}]))
    await asyncio.to_thread(run_as_the_kubelet_would, pod, bucket, source_env, redis, ns, monkeypatch)


def run_as_the_kubelet_would(pod: dict, bucket: str, source_env: dict[str, str], redis: RedisDatabase,
                             ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = pod["spec"]["initContainers"][0]
    assert sidecar["name"] == "alnair-s3-gateway" and sidecar["envFrom"] == [{"secretRef": {"name": "s3-keys"}}]
    port = free_port()
    command = [str(Path(sys.executable).with_name(sidecar["command"][0])), *sidecar["command"][1:]]  # its script
    command[command.index("--listen") + 1] = f"127.0.0.1:{port}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ALNAIR_", "AWS_"))},
           **{e["name"]: e["value"] for e in sidecar["env"]},
           # the secret the sidecar's envFrom names: the S3 keys (the endpoint stands for AWS's)
           **source_env}
    gateway = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        container_env(pod, monkeypatch)
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            monkeypatch.delenv(k)
        for var in pod["spec"]["containers"][0]["env"]:
            monkeypatch.setenv(var["name"], var["value"].replace(":9494", f":{port}"))
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "the-pods-own")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "keys")
        assert os.environ["AWS_ENDPOINT_URL_S3"] == f"http://127.0.0.1:{port}"
        client = boto3.session.Session().client("s3")  # the training code: no endpoint named
        deadline = time.monotonic() + 30
        while True:
            try:
                listed = client.list_objects_v2(Bucket=bucket, Prefix="imagenet/")
                break
            except Exception:
                assert gateway.poll() is None, gateway.stderr.read() if gateway.stderr else ""
                assert time.monotonic() < deadline, "the gateway never answered"
                time.sleep(0.2)
        assert sorted(o["Key"] for o in listed["Contents"]) == sorted(f"imagenet/{n}" for n in FILES)
        for name, data in FILES.items():
            assert client.get_object(Bucket=bucket, Key=f"imagenet/{name}")["Body"].read() == data
        client.close()
        # Read through the cache: the two misses were written back by the gateway's reader.
        tier = open_tier(redis.url, prefix=redis.prefix, budget_bytes=1 << 30)
        try:
            deadline = time.monotonic() + 30
            while len(tier.manifest(f"{ns}.imagenet")) < len(FILES):
                assert time.monotonic() < deadline, "the misses were never written back"
                time.sleep(0.2)
        finally:
            tier.close()
    finally:
        gateway.terminate()
        _, err = gateway.communicate(timeout=30)
    assert f"serving s3://{bucket}/imagenet/ (data set imagenet)" in err
