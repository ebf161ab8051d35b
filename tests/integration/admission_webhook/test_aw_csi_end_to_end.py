"""The seed form end to end, as the kubelet would carry it out: the webhook switches a seed
pod created through the real API server, the CSI volume it stored is published by the
dataset CSI plugin (real gRPC, real FUSE) with the pod's namespace as the kubelet adds it,
and the files under the mount are the node directory's, read through the namespace's
read-only tier user on a real redis-server."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from conftest import Webhook, pod_manifest

from alnair_admission_webhook._csi_switch import cache_volume_name
from alnair_common.annotations import SEED_CACHE_DATASET
from alnair_common.dataset_refs import CSI_DRIVER, host_path_name
from alnair_common.testing.redis import RedisDatabase
from alnair_common.tier_readers import reader_password, reader_user
from alnair_dataset import Budget, is_mounted, open_source, open_tier, store_file, unmount
from alnair_dataset_csi import DatasetCsiSettings
from alnair_dataset_csi._server import start
from alnair_kubelet.api import csi, csi_grpc

KEY = "webhook-plugin-and-hydrator-share-it"


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse: FUSE mounts untested here")
async def test_a_switched_seed_pod_reads_its_host_path_through_the_cache(
        webhook: Webhook, redis: RedisDatabase, tmp_path: Path) -> None:
    ns = webhook.kube.namespace
    node_dir = tmp_path / "node" / "mnt" / "images"
    node_dir.mkdir(parents=True)
    files = {f"part-{i}.bin": os.urandom(70_000 + i) for i in range(3)}
    for name, data in files.items():
        (node_dir / name).write_bytes(data)
    key = f"{ns}.{host_path_name(str(node_dir))}"
    admin = open_tier(redis.url, prefix=redis.prefix, budget_bytes=1 << 30)
    source = open_source(f"file://{node_dir}")
    admin.set_meta(key, {"source": f"file://{node_dir}", "include": "[]", "exclude": "[]",
                         "phase": "ready", "budget_bytes": str(1 << 30)})
    for f in source.list():  # as the hydrator stores what kube-bridge asked for
        store_file(admin, key, source, f, Budget(admin))
    admin.grant_reader(ns, reader_user(ns), reader_password(KEY, ns))
    webhook.overrides = {"pod_tier_url": redis.url, "pod_cache_prefix": redis.prefix,
                         "cache_reader_key": KEY}
    await webhook.start()
    plugin = start(DatasetCsiSettings(
        csi_endpoint=f"unix://{tmp_path}/csi/csi.sock", node_name="n1", pod_tier_url=redis.url,
        cache_reader_key=KEY, pod_cache_prefix=redis.prefix, state_dir=tmp_path / "csi-state"))
    channel = grpc.insecure_channel(f"unix://{tmp_path}/csi/csi.sock")
    target = tmp_path / "kubelet" / "pods" / "uid" / "volumes" / "kubernetes.io~csi" / "v" / "mount"
    try:
        pod, _ = await webhook.create_pod(pod_manifest(
            "seed-reader", {SEED_CACHE_DATASET: "yes"},
            volumes=[{"name": "images", "hostPath": {"path": str(node_dir)}}],
            containers=[{"name": "train", "image": "trainer:1",
                         "volumeMounts": [{"name": "images", "mountPath": "/data", "readOnly": True}]}]))
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == cache_volume_name("images")]
        assert volume["csi"]["driver"] == CSI_DRIVER
        context = {**volume["csi"]["volumeAttributes"],  # what the kubelet adds (podInfoOnMount)
                   "csi.storage.k8s.io/pod.namespace": ns, "csi.storage.k8s.io/pod.name": "seed-reader",
                   "csi.storage.k8s.io/ephemeral": "true"}
        node = csi_grpc.NodeStub(channel)
        node.NodePublishVolume(csi.NodePublishVolumeRequest(
            volume_id="csi-e2e", target_path=str(target), readonly=True, volume_context=context,
            volume_capability=csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume())),
            timeout=60)
        assert is_mounted(target)
        assert {p.name: p.read_bytes() for p in target.iterdir()} == files
        node.NodeUnpublishVolume(csi.NodeUnpublishVolumeRequest(
            volume_id="csi-e2e", target_path=str(target)), timeout=60)
        assert not is_mounted(target)
    finally:
        if is_mounted(target):
            unmount(target)
        channel.close()
        plugin.stop(grace=None)
        admin.revoke_reader(reader_user(ns))
        admin.close()
