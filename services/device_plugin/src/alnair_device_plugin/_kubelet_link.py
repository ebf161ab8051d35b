"""Serving the plugin sockets and staying registered with the kubelet across its restarts.

A restarting kubelet deletes every socket in its device-plugins directory and forgets all
plugins. We poll (``poll_seconds``, default 0.25 s) for our sockets and the inode of
``kubelet.sock``; when either changes we start fresh servers on new sockets and register each
resource again — well within the 5 s the kubelet gives plugins before pods are affected.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import grpc
import grpc.aio

from alnair_common import get_logger
from alnair_kubelet.api import API_VERSION
from alnair_kubelet.api import deviceplugin as dp
from alnair_kubelet.api import deviceplugin_grpc as dp_grpc

from . import _metrics
from ._plugin_server import ResourcePlugin

log = get_logger("alnair.device-plugin")


class KubeletLink:
    def __init__(self, directory: Path, plugins: list[ResourcePlugin], *, poll_seconds: float = 0.25,
                 register_timeout: float = 5.0) -> None:
        self.directory = Path(directory)
        self.kubelet_socket = self.directory / "kubelet.sock"
        self.plugins = plugins
        self.poll_seconds = poll_seconds
        self.register_timeout = register_timeout
        self.registrations = 0
        self.registered = asyncio.Event()
        self._servers: list[grpc.aio.Server] = []

    def sockets(self) -> list[Path]:
        return [self.directory / p.resource.socket_name for p in self.plugins]

    async def run(self, stop: asyncio.Event) -> None:
        """Serve and stay registered until ``stop`` is set."""
        try:
            while not stop.is_set():
                if not await self._wait(stop, self.kubelet_socket.exists):
                    return
                try:
                    inode = self.kubelet_socket.stat().st_ino
                    await self._serve()
                    await self._register()
                except (grpc.aio.AioRpcError, OSError) as e:
                    log.warning("registration with the kubelet failed; retrying in 0.5 s",
                                socket=str(self.kubelet_socket), error=str(e))
                    await self._stop_servers()
                    await self._pause(stop, 0.5)
                    continue
                self.registered.set()
                await self._wait(stop, lambda inode=inode: self._kubelet_restarted(inode))
                self.registered.clear()
                if not stop.is_set():
                    log.warning("kubelet restarted (sockets removed); serving and registering again")
                await self._stop_servers()
        finally:
            await self._stop_servers()

    def _kubelet_restarted(self, inode: int) -> bool:
        try:
            if self.kubelet_socket.stat().st_ino != inode:
                return True
        except FileNotFoundError:
            return True
        return not all(s.exists() for s in self.sockets())

    async def _serve(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for plugin, socket in zip(self.plugins, self.sockets(), strict=True):
            socket.unlink(missing_ok=True)
            server = grpc.aio.server()
            dp_grpc.add_DevicePluginServicer_to_server(plugin, server)
            server.add_insecure_port(f"unix://{socket}")
            await server.start()
            self._servers.append(server)

    async def _register(self) -> None:
        async with grpc.aio.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            stub = dp_grpc.RegistrationStub(channel)
            for plugin in self.plugins:
                await stub.Register(dp.RegisterRequest(
                    version=API_VERSION, endpoint=plugin.resource.socket_name,
                    resource_name=plugin.resource.resource_name,
                    options=dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True),
                ), timeout=self.register_timeout)
                self.registrations += 1
                _metrics.REGISTRATIONS.labels(plugin.resource.resource_name).inc()
                log.info("registered with the kubelet", resource=plugin.resource.resource_name,
                         endpoint=plugin.resource.socket_name)

    async def _stop_servers(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop(grace=0.5)

    async def _wait(self, stop: asyncio.Event, condition: Callable[[], bool]) -> bool:
        """Poll ``condition`` until true (True) or ``stop`` (False)."""
        while not stop.is_set():
            if condition():
                return True
            await self._pause(stop, self.poll_seconds)
        return False

    async def _pause(self, stop: asyncio.Event, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
