"""kube-bridge's event lanes: in order per object, objects at once, a list as a barrier."""

from __future__ import annotations

import asyncio

import pytest

from alnair_common import TemporaryError
from alnair_common.testing import wait_for
from alnair_kube_bridge import Changed, Synced
from alnair_kube_bridge._lanes import drain


async def until(condition: bool) -> bool:
    return condition


def changed(uid: str, step: int) -> Changed:
    return Changed("pods", "MODIFIED", {"metadata": {"uid": uid}, "step": step})


async def test_one_objects_events_stay_in_order_while_others_go_on() -> None:
    queue: asyncio.Queue = asyncio.Queue()
    slow_uid_may_go = asyncio.Event()
    handled: list[tuple[str, int]] = []

    async def handle(item) -> None:
        if isinstance(item, Changed):
            uid, step = item.obj["metadata"]["uid"], item.obj["step"]
            if uid == "slow" and step == 0:
                await slow_uid_may_go.wait()
            handled.append((uid, step))

    task = asyncio.create_task(drain("pods", queue, handle, lanes=4))
    for step in range(3):
        queue.put_nowait(changed("slow", step))
    others = [f"pod-{i}" for i in range(20)]
    for uid in others:
        queue.put_nowait(changed(uid, 0))
    # Every pod that shares no lane with "slow" is handled while "slow" waits.
    await wait_for(lambda: until(sum(1 for uid, _ in handled if uid != "slow") >= 10),
                   what="other pods handled")
    assert not [h for h in handled if h[0] == "slow"]
    slow_uid_may_go.set()
    await wait_for(lambda: until(len(handled) == 23), what="every event handled")
    assert [step for uid, step in handled if uid == "slow"] == [0, 1, 2]
    task.cancel()


async def test_a_list_waits_for_every_lane_and_later_items_wait_for_it() -> None:
    queue: asyncio.Queue = asyncio.Queue()
    release = asyncio.Event()
    log: list[str] = []
    synced: list[str] = []

    async def handle(item) -> None:
        if isinstance(item, Synced):
            log.append("list")
            return
        uid = item.obj["metadata"]["uid"]
        if uid == "before-slow":
            await release.wait()
        log.append(uid)

    task = asyncio.create_task(drain("pods", queue, handle, lanes=8, synced=synced.append))
    queue.put_nowait(changed("before-slow", 0))
    queue.put_nowait(changed("before", 0))
    queue.put_nowait(Synced("pods", [], "7"))
    queue.put_nowait(changed("after", 0))
    await asyncio.sleep(0.1)
    assert log == ["before"] and not synced  # the list waits for the slow lane
    release.set()
    await wait_for(lambda: until(len(log) == 4), what="every item handled")
    assert log == ["before", "before-slow", "list", "after"]
    assert synced == ["pods"]
    task.cancel()


async def test_a_failing_item_is_retried_not_skipped() -> None:
    queue: asyncio.Queue = asyncio.Queue()
    attempts: list[int] = []
    handled: list[int] = []

    async def handle(item) -> None:
        step = item.obj["step"]
        if step == 0 and len(attempts) < 2:
            attempts.append(step)
            raise TemporaryError("bus away")
        handled.append(step)

    task = asyncio.create_task(drain("pods", queue, handle, lanes=2))
    queue.put_nowait(changed("a", 0))
    queue.put_nowait(changed("a", 1))
    await wait_for(lambda: until(len(handled) == 2), what="both steps handled")
    assert handled == [0, 1] and len(attempts) == 2
    task.cancel()


async def test_an_unexpected_failure_ends_the_drain() -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def handle(item) -> None:
        raise RuntimeError("bug")

    task = asyncio.create_task(drain("pods", queue, handle, lanes=3))
    queue.put_nowait(changed("a", 0))
    with pytest.raises(ExceptionGroup) as info:
        async with asyncio.timeout(5):
            await task
    assert info.group_contains(RuntimeError)
