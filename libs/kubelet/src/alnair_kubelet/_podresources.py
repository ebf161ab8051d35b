"""Which devices the kubelet gave to which container: the PodResources v1 ``List`` API.

The kubelet serves it on ``/var/lib/kubelet/pod-resources/kubelet.sock``. It is the one place
that ties a device ID the plugin handed out to a pod and container after the fact, so the
exporter and the device plugin use it to attribute GPU shares without guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from ._api import podresources_v1_pb2 as pb
from ._api import podresources_v1_pb2_grpc as pb_grpc
from ._errors import KubeletError, KubeletUnavailableError

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# The kubelet's own limit for this API's answers (16 MiB); large nodes list many pods.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ContainerDevices:
    """The device IDs of one resource held by one container."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PodResourcesSnapshot:
    """Every device the kubelet had allocated at one moment."""

    entries: tuple[ContainerDevices, ...]

    @classmethod
    def from_proto(cls, response: pb.ListPodResourcesResponse) -> PodResourcesSnapshot:
        entries = []
        for pod in response.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    entries.append(ContainerDevices(
                        namespace=pod.namespace, pod=pod.name, container=container.name,
                        resource=devices.resource_name, device_ids=tuple(devices.device_ids)))
        return cls(tuple(entries))

    def owner_of(self, device_id: str, resource: str | None = None) -> ContainerDevices | None:
        """The container holding ``device_id`` (of ``resource``, when given)."""
        for entry in self.entries:
            if (resource is None or entry.resource == resource) and device_id in entry.device_ids:
                return entry
        return None

    def devices_of(self, namespace: str, pod: str, resource: str | None = None) -> tuple[ContainerDevices, ...]:
        return tuple(e for e in self.entries if e.namespace == namespace and e.pod == pod
                     and (resource is None or e.resource == resource))

    def in_use(self, resource: str) -> frozenset[str]:
        return frozenset(d for e in self.entries if e.resource == resource for d in e.device_ids)


class PodResourcesClient:
    """An async client of the kubelet's PodResources v1 service on a unix socket."""

    def __init__(self, socket_path: Path = DEFAULT_SOCKET, *, timeout: float = 5.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._channel = grpc.aio.insecure_channel(
            f"unix://{self.socket_path}",
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        self._stub = pb_grpc.PodResourcesListerStub(self._channel)

    async def list(self) -> PodResourcesSnapshot:
        """All pods' devices now. A missing socket or no answer is temporary."""
        if not self.socket_path.exists():
            raise KubeletUnavailableError(
                f"no PodResources socket at {self.socket_path}: is the kubelet running, and is "
                "/var/lib/kubelet/pod-resources mounted into this container?")
        try:
            response = await self._stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise KubeletUnavailableError(
                    f"PodResources List on {self.socket_path} failed within {self.timeout:.1f} s: "
                    f"{e.code().name} {e.details()}") from e
            raise KubeletError(f"PodResources List on {self.socket_path}: {e.code().name} {e.details()}") from e
        return PodResourcesSnapshot.from_proto(response)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> PodResourcesClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()
