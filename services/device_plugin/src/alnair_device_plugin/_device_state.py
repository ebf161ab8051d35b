"""The node's GPUs as the plugin currently advertises them, with change notification.

``ListAndWatch`` streams must send the full device list again on every change; each stream
waits here for a version newer than the one it sent last.
"""

from __future__ import annotations

import asyncio

from alnair_gpu import NodeGpus


class DeviceState:
    def __init__(self, gpus: NodeGpus) -> None:
        self._gpus = gpus
        self.version = 1
        self._changed = asyncio.Condition()

    @property
    def gpus(self) -> NodeGpus:
        return self._gpus

    async def update(self, gpus: NodeGpus) -> None:
        async with self._changed:
            self._gpus = gpus
            self.version += 1
            self._changed.notify_all()

    async def newer_than(self, version: int) -> tuple[NodeGpus, int]:
        async with self._changed:
            await self._changed.wait_for(lambda: self.version > version)
            return self._gpus, self.version
