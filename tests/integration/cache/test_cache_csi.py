"""The dataset CSI node plugin as the kubelet calls it: real gRPC on a unix socket, a real
redis-server tier with per-namespace read-only users, real FUSE mounts. A pod's volume shows
its namespace's data set, byte for byte, and nothing of another namespace."""

from __future__ import annotations

import errno
from pathlib import Path

import grpc
import pytest
from cache_support import hydrate_directly, write_dataset

from alnair_common.tier_readers import reader_password, reader_user
from alnair_dataset import is_mounted, open_tier
from alnair_dataset_csi import DatasetCsiSettings
from alnair_dataset_csi._server import health, start
from alnair_kubelet.api import csi, csi_grpc

KEY = "the-reader-key-of-the-cluster..."


@pytest.fixture
def plane(fuse_ok, redis_node, tmp_path):
    """A tier holding team-a's data set 'images', users for team-a and team-b, the plugin."""
    node = redis_node()
    files = write_dataset(tmp_path / "src", files=3, size=300_000)
    admin = open_tier(node.url, budget_bytes=1 << 40, prefix="t")
    hydrate_directly(admin, "team-a.images", f"file://{tmp_path}/src")
    for namespace in ("team-a", "team-b"):
        admin.grant_reader(namespace, reader_user(namespace), reader_password(KEY, namespace))
    settings = DatasetCsiSettings(csi_endpoint=f"unix://{tmp_path}/csi/csi.sock", node_name="n1",
                                  pod_tier_url=node.url, cache_reader_key=KEY, pod_cache_prefix="t",
                                  state_dir=tmp_path / "state", mount_timeout_seconds=30)
    server = start(settings)
    channel = grpc.insecure_channel(settings.csi_endpoint)
    yield node, files, csi_grpc.NodeStub(channel), csi_grpc.IdentityStub(channel), tmp_path, settings
    channel.close()
    server.stop(grace=None)
    admin.close()


def publish(node_stub, target: Path, dataset: str = "images", namespace: str = "team-a",
            volume: str = "csi-0123abcd"):
    context = {"csi.storage.k8s.io/pod.name": "train", "csi.storage.k8s.io/ephemeral": "true"}
    if dataset:
        context["dataset"] = dataset
    if namespace:
        context["csi.storage.k8s.io/pod.namespace"] = namespace
    capability = csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(),
                                      access_mode=csi.VolumeCapability.AccessMode(mode=1))
    return node_stub.NodePublishVolume(csi.NodePublishVolumeRequest(
        volume_id=volume, target_path=str(target), volume_capability=capability, readonly=True,
        volume_context=context), timeout=60)


def target_of(root: Path, pod: str = "uid-1") -> Path:
    return root / "kubelet" / "pods" / pod / "volumes" / "kubernetes.io~csi" / "data" / "mount"


def test_a_pod_volume_is_its_namespaces_data_set_read_only_through_the_cache(plane):
    _, files, node_stub, identity, root, _settings = plane
    info = identity.GetPluginInfo(csi.GetPluginInfoRequest())
    assert info.name == "datasets.alnair.centaurus.io"
    assert identity.Probe(csi.ProbeRequest()).ready.value
    assert node_stub.NodeGetInfo(csi.NodeGetInfoRequest()).node_id == "n1"
    target = target_of(root)
    publish(node_stub, target)
    publish(node_stub, target)  # the kubelet retries: the same mount stands
    assert is_mounted(target)
    for path, data in files.items():
        assert (target / path).read_bytes() == data
    with pytest.raises(OSError) as refused:
        (target / "new.bin").write_bytes(b"x")
    assert refused.value.errno == errno.EROFS
    node_stub.NodeUnpublishVolume(csi.NodeUnpublishVolumeRequest(
        volume_id="csi-0123abcd", target_path=str(target)), timeout=60)
    assert not is_mounted(target) and not target.exists()
    node_stub.NodeUnpublishVolume(csi.NodeUnpublishVolumeRequest(  # again: nothing to do
        volume_id="csi-0123abcd", target_path=str(target)), timeout=60)


@pytest.mark.parametrize(("change", "code", "says"), [
    ({"namespace": "team-b"}, grpc.StatusCode.NOT_FOUND, "namespace 'team-b' has no data set 'images'"),
    ({"dataset": "missing"}, grpc.StatusCode.NOT_FOUND, "has no data set 'missing'"),
    ({"dataset": ""}, grpc.StatusCode.INVALID_ARGUMENT, "names no data set"),
    ({"dataset": "Bad_Name"}, grpc.StatusCode.INVALID_ARGUMENT, "Bad_Name"),
    ({"namespace": ""}, grpc.StatusCode.FAILED_PRECONDITION, "podInfoOnMount: true"),
    ({"volume": "../etc"}, grpc.StatusCode.INVALID_ARGUMENT, "volume id"),
])
def test_what_a_pod_may_not_have_is_refused_with_the_reason(plane, change, code, says):
    _, _, node_stub, _, root, _settings = plane
    target = target_of(root, "uid-2")
    with pytest.raises(grpc.RpcError) as refused:
        publish(node_stub, target, **change)
    assert refused.value.code() == code
    assert says in refused.value.details()
    assert not is_mounted(target)


def test_a_relative_target_and_a_tier_that_is_down_are_refused(plane):
    node, _, node_stub, _, root, _settings = plane
    with pytest.raises(grpc.RpcError) as refused:
        publish(node_stub, Path("relative/mount"))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    node.kill()
    with pytest.raises(grpc.RpcError) as refused:
        publish(node_stub, target_of(root, "uid-3"))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # the kubelet tries again
    assert "does not answer" in refused.value.details()


def test_the_health_endpoint_follows_the_kubelets_socket(plane):
    import urllib.error
    import urllib.request

    *_, settings = plane
    probes = health(settings)
    url = f"http://127.0.0.1:{probes.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as up:
            assert up.status == 200
        Path(settings.socket_path).unlink()  # the kubelet can no longer reach the plugin
        with pytest.raises(urllib.error.HTTPError) as down:
            urllib.request.urlopen(f"{url}/healthz", timeout=5)
        assert down.value.code == 503
        down.value.close()
    finally:
        probes.shutdown()
        probes.server_close()
