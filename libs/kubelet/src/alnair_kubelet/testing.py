"""The kubelet's side of its node APIs, for tests: real gRPC servers on unix sockets.

:class:`KubeletHarness` serves ``v1beta1.Registration`` on ``<dir>/kubelet.sock`` like the
kubelet's device manager, records every registration, dials a registered plugin back on its
socket, and can "restart" the way the kubelet does (every socket in the directory deleted,
a new ``kubelet.sock``). :class:`PodResourcesHarness` serves ``v1.PodResourcesLister`` with the
pods a test sets. Nothing is mocked: plugins under test speak real gRPC to these servers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import grpc.aio

from ._api import deviceplugin_v1beta1_pb2 as dp
from ._api import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from ._api import podresources_v1_pb2 as pr
from ._api import podresources_v1_pb2_grpc as pr_grpc

API_VERSION = "v1beta1"


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, harness: KubeletHarness) -> None:
        self.harness = harness

    async def Register(self, request: dp.RegisterRequest, context: grpc.aio.ServicerContext) -> dp.Empty:  # noqa: N802
        if request.version != API_VERSION:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"version {request.version!r} not supported; this kubelet speaks {API_VERSION}")
        if not (self.harness.directory / request.endpoint).exists():
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"no socket {request.endpoint!r} in {self.harness.directory}")
        async with self.harness._changed:
            self.harness.registrations.append(request)
            self.harness._changed.notify_all()
        return dp.Empty()


class KubeletHarness:
    """A device manager endpoint in ``directory`` that plugins register with."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.socket = self.directory / "kubelet.sock"
        self.registrations: list[dp.RegisterRequest] = []
        self._changed = asyncio.Condition()
        self._server: grpc.aio.Server | None = None
        self._channels: list[grpc.aio.Channel] = []

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def restart(self) -> int:
        """What a kubelet restart does to the directory; returns how many registrations came before."""
        before = len(self.registrations)
        await self.stop()
        for path in self.directory.glob("*.sock"):
            path.unlink(missing_ok=True)
        await self.start()
        return before

    async def wait_registered(self, resource: str, *, after: int = 0, timeout: float = 5.0) -> dp.RegisterRequest:
        """The first registration of ``resource`` among those numbered ``after`` or later."""

        def found() -> dp.RegisterRequest | None:
            return next((r for r in self.registrations[after:] if r.resource_name == resource), None)

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: found() is not None), timeout)
        request = found()
        assert request is not None
        return request

    def plugin(self, registration: dp.RegisterRequest) -> dp_grpc.DevicePluginStub:
        """A client of the plugin that sent ``registration``, as the kubelet would dial it."""
        channel = grpc.aio.insecure_channel(f"unix://{self.directory / registration.endpoint}")
        self._channels.append(channel)
        return dp_grpc.DevicePluginStub(channel)


class _Lister(pr_grpc.PodResourcesListerServicer):
    def __init__(self, harness: PodResourcesHarness) -> None:
        self.harness = harness

    async def List(self, request: pr.ListPodResourcesRequest, context: grpc.aio.ServicerContext  # noqa: N802
                   ) -> pr.ListPodResourcesResponse:
        return pr.ListPodResourcesResponse(pod_resources=self.harness.pods)


class PodResourcesHarness:
    """The kubelet's PodResources service on ``socket``, answering with ``pods``."""

    def __init__(self, socket: Path) -> None:
        self.socket = Path(socket)
        self.pods: list[pr.PodResources] = []
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
