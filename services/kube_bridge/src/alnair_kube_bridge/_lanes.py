"""Hand watch items to their handler: in order per object, several objects at once.

One object's events must be handled in order (its lifecycle only moves forward), but two
pods have nothing to do with each other, and each event costs bus round trips: with one
queue for everything, a burst of new pods waits behind the bound and running events of the
pods before it. Items are spread over ``lanes`` by the object's uid. A list (``Synced``) is
a barrier: it waits until every lane is empty, is handled alone, and only then do later
items go on — the relist compares with the records, which must be up to date. An item that
fails is retried with backoff, never skipped (the later items of its lane wait for it).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable

from alnair_common import AlnairError, get_logger

from ._watch import Changed, Synced

Item = Synced | Changed
log = get_logger("alnair.kube-bridge.lanes")


async def drain(kind: str, queue: asyncio.Queue[Item], handle: Callable[[Item], Awaitable[None]],
                *, lanes: int = 1, synced: Callable[[str], None] = lambda _kind: None) -> None:
    """Handle every item of ``queue`` until cancelled; ``synced(kind)`` after each list."""
    if lanes <= 1:
        while True:
            item = await queue.get()
            await _handle_until_done(kind, item, handle)
            if isinstance(item, Synced):
                synced(kind)
    lane_queues: list[asyncio.Queue[Item]] = [asyncio.Queue() for _ in range(lanes)]

    async def dispatch() -> None:
        while True:
            item = await queue.get()
            if isinstance(item, Synced):
                for q in lane_queues:
                    await q.join()
                await _handle_until_done(kind, item, handle)
                synced(kind)
            else:
                lane_queues[_lane_of(item, lanes)].put_nowait(item)

    # A lane that fails for good takes the others and the dispatcher down with it (and the
    # service, whose supervisor restarts it), as the single queue did.
    async with asyncio.TaskGroup() as group:
        for i, q in enumerate(lane_queues):
            group.create_task(_lane(kind, q, handle), name=f"events-{kind}-{i}")
        group.create_task(dispatch(), name=f"events-{kind}-dispatch")


def _lane_of(item: Changed, lanes: int) -> int:
    meta = item.obj.get("metadata") or {}
    key = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
    return zlib.crc32(key.encode()) % lanes


async def _lane(kind: str, queue: asyncio.Queue[Item],
                handle: Callable[[Item], Awaitable[None]]) -> None:
    while True:
        item = await queue.get()
        try:
            await _handle_until_done(kind, item, handle)
        finally:
            queue.task_done()


async def _handle_until_done(kind: str, item: Item,
                             handle: Callable[[Item], Awaitable[None]]) -> None:
    delay = 0.1
    while True:
        try:
            await handle(item)
            return
        except AlnairError as e:
            log.warning("publishing failed; retrying", kind=kind, error=str(e), retry_in=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
