"""The CSI Identity and Node services: a pod's volume is one data set of the pod's namespace,
mounted read-only through the cache on the path the kubelet names.

A pod asks with a CSI ephemeral volume, ``csi: {driver: datasets.alnair.centaurus.io,
readOnly: true, volumeAttributes: {dataset: imagenet}}`` (or the admission webhook puts one
in place of a seed-form hostPath). NodePublishVolume mounts the data set there with
``alnair_dataset.spawn_mount`` — a FUSE process per volume that reads as the pod's
namespace's read-only tier user (``alnair_common.tier_readers``), so a pod can only ever see
its own namespace's data sets, and that reads misses from the data set's source as the
hydrator recorded it. NodeUnpublishVolume unmounts it. Both are idempotent, as the kubelet
retries them. The namespace comes from the kubelet (``podInfoOnMount: true`` on the
CSIDriver), never from the pod's own attributes.

Answers: INVALID_ARGUMENT for a request that names no data set, or a bad name;
FAILED_PRECONDITION when the kubelet gives no pod namespace (the CSIDriver object lacks
podInfoOnMount); NOT_FOUND for a data set the namespace does not have; UNAVAILABLE when the
tier cannot be reached (the kubelet retries); INTERNAL with the mount's log when the mount
fails.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import grpc

from alnair_common import get_logger
from alnair_common.dataset_refs import CSI_DATASET, CSI_DRIVER, DatasetRefError, check_name
from alnair_common.tier_readers import has_users, reader_url
from alnair_dataset import (
    DatasetError,
    MountError,
    TierUnavailableError,
    is_mounted,
    open_tier,
    spawn_mount,
    unmount,
)
from alnair_kubelet.api import csi, csi_grpc

from ._settings import DatasetCsiSettings

log = get_logger("alnair.dataset-csi")
VERSION = "0.1.0"
POD_NAMESPACE = "csi.storage.k8s.io/pod.namespace"
POD_NAME = "csi.storage.k8s.io/pod.name"
_VOLUME_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class DatasetIdentity(csi_grpc.IdentityServicer):
    def GetPluginInfo(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC names
        return csi.GetPluginInfoResponse(name=CSI_DRIVER, vendor_version=VERSION)

    def GetPluginCapabilities(self, request: Any, context: Any) -> Any:  # noqa: N802
        return csi.GetPluginCapabilitiesResponse()  # a node plugin only: no controller

    def Probe(self, request: Any, context: Any) -> Any:  # noqa: N802
        response = csi.ProbeResponse()
        response.ready.value = True
        return response


class DatasetNode(csi_grpc.NodeServicer):
    def __init__(self, settings: DatasetCsiSettings) -> None:
        self.settings = settings
        settings.state_dir.mkdir(parents=True, exist_ok=True)

    def NodeGetInfo(self, request: Any, context: Any) -> Any:  # noqa: N802
        return csi.NodeGetInfoResponse(node_id=self.settings.node_name)

    def NodeGetCapabilities(self, request: Any, context: Any) -> Any:  # noqa: N802
        return csi.NodeGetCapabilitiesResponse()  # no staging: each volume mounts on its own

    def NodePublishVolume(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self.publish(request)
        except _Refused as e:
            log.warning("volume refused", volume=request.volume_id, code=e.code.name, why=str(e))
            context.abort(e.code, str(e))
        return csi.NodePublishVolumeResponse()

    def NodeUnpublishVolume(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self.unpublish(request.volume_id, request.target_path)
        except _Refused as e:
            context.abort(e.code, str(e))
        return csi.NodeUnpublishVolumeResponse()

    # -- the work ---------------------------------------------------------------------------

    def publish(self, request: Any) -> None:
        volume, target = _volume_id(request.volume_id), _target(request.target_path)
        attributes = dict(request.volume_context)
        name = attributes.get(CSI_DATASET, "")
        if not name:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                           f"volume attribute {CSI_DATASET!r} names no data set: write "
                           f"volumeAttributes: {{{CSI_DATASET}: <name of a Dataset of the pod's "
                           "namespace>}")
        try:
            check_name(name)
        except DatasetRefError as e:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from e
        namespace = attributes.get(POD_NAMESPACE, "")
        if not namespace:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                           f"the kubelet gave no pod namespace: the CSIDriver {CSI_DRIVER} must "
                           "set podInfoOnMount: true (k8s/base/dataset-csi)")
        if is_mounted(target):
            return  # published before: the kubelet retried
        url = self._tier_url(namespace)
        self._check_known(url, namespace, name)
        os.makedirs(target, exist_ok=True)
        env = {**os.environ, "ALNAIR_DATASET_NAMESPACE": namespace}
        try:
            pid, _ = spawn_mount([name], target, tier_url=url, prefix=self.settings.pod_cache_prefix,
                                 allow_other=True, env=env,
                                 log_path=str(self.settings.state_dir / f"{volume}.log"),
                                 timeout=self.settings.mount_timeout_seconds)
        except MountError as e:
            raise _Refused(grpc.StatusCode.INTERNAL, f"mounting {namespace}/{name}: {e}") from e
        log.info("volume published", volume=volume, dataset=f"{namespace}/{name}",
                 pod=attributes.get(POD_NAME, ""), target=target, pid=pid)

    def unpublish(self, volume_id: str, target_path: str) -> None:
        volume, target = _volume_id(volume_id), _target(target_path)
        if is_mounted(target):
            try:
                unmount(target)
            except MountError as e:
                raise _Refused(grpc.StatusCode.INTERNAL, str(e)) from e
        if os.path.isdir(target):
            os.rmdir(target)  # empty once unmounted; anything else is not ours to delete
        (self.settings.state_dir / f"{volume}.log").unlink(missing_ok=True)
        log.info("volume unpublished", volume=volume, target=target)

    def _tier_url(self, namespace: str) -> str:
        s = self.settings
        key = s.cache_reader_key.get_secret_value()
        if not s.pod_tier_url:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                           "the plugin has no tier (ALNAIR_POD_TIER_URL): set it in its DaemonSet")
        if key and has_users(s.pod_tier_url):
            try:
                return reader_url(s.pod_tier_url, key, namespace)
            except ValueError as e:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from e
        return s.pod_tier_url

    def _check_known(self, url: str, namespace: str, name: str) -> None:
        """NOT_FOUND before mounting, for a data set the namespace does not have; UNAVAILABLE
        when the tier does not answer (a mount would only read the source)."""
        try:
            tier = open_tier(url, budget_bytes=0, prefix=self.settings.pod_cache_prefix)
            try:
                known = bool(tier.meta(f"{namespace}.{name}"))
            finally:
                tier.close()
        except TierUnavailableError as e:
            raise _Refused(grpc.StatusCode.UNAVAILABLE, f"the cache tier does not answer: {e}") from e
        except DatasetError as e:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION, f"the cache tier: {e}") from e
        if not known:
            raise _Refused(grpc.StatusCode.NOT_FOUND,
                           f"namespace {namespace!r} has no data set {name!r} in the cache: create "
                           f"a Dataset {name} in {namespace} (k8s/examples/dataset.yaml), or check "
                           "the name")


def _volume_id(volume_id: str) -> str:
    if not _VOLUME_ID.match(volume_id):
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"volume id {volume_id!r} is not one "
                       "the kubelet makes (letters, digits, '.', '_', '-')")
    return volume_id


def _target(target_path: str) -> str:
    if not target_path or not os.path.isabs(target_path) or ".." in Path(target_path).parts:
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                       f"target path {target_path!r} must be absolute, without '..'")
    return target_path

