"""One leader among replicas: a standby takes over within the lease when the leader dies, at
once when it stops cleanly, and a leader whose lease was taken stops acting."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import ClassVar

from alnair_common import Bus, Service, ServiceSettings, ensure_streams
from alnair_common.leadership import Leadership
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for

TTL = 1.0


class Replica(Service):
    name = "scheduler"
    leader_elected: ClassVar[bool] = True
    setups = 0

    async def setup(self) -> None:
        type(self).setups += 1


async def start(url: str) -> tuple[Replica, asyncio.Task]:
    replica = Replica(ServiceSettings(nats_url=url, node_name="n", leader_lease_seconds=TTL))
    return replica, asyncio.create_task(replica.run())


async def stop(replica: Replica, task: asyncio.Task) -> None:
    replica.request_stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 20)


async def test_a_standby_waits_and_takes_over_at_once_after_a_clean_stop(nats_server: NatsServer) -> None:
    Replica.setups = 0
    first, first_task = await start(nats_server.url)
    await wait_for(lambda: asyncio.sleep(0, first.ready.is_set()), what="the first replica leading")
    second, second_task = await start(nats_server.url)
    try:
        async def standing_by() -> str | None:
            report = await second.health.report()
            return report.role if report.role.startswith("standby:") and "leads" in report.role \
                else None

        reason = await wait_for(standing_by, what="the second replica standing by")
        assert first.leadership is not None and first.leadership.holder in reason
        assert not second.ready.is_set() and Replica.setups == 1
        stopped = time.monotonic()
        await stop(first, first_task)
        await wait_for(lambda: asyncio.sleep(0, second.ready.is_set()), timeout=TTL * 3,
                       what="the standby leading")
        assert time.monotonic() - stopped < TTL, "a clean stop hands the lease over at once"
        report = await second.health.report()
        assert Replica.setups == 2 and report.ready and not report.role.startswith("standby")
    finally:
        await stop(second, second_task)


async def test_a_dead_leaders_lease_is_taken_over_after_its_ttl(bus: Bus) -> None:
    await ensure_streams(bus)
    dead = await Leadership.acquire(bus, "kube-bridge", "pod-a", ttl=TTL)  # never renews again
    started = time.monotonic()
    successor = await asyncio.wait_for(
        Leadership.acquire(bus, "kube-bridge", "pod-b", ttl=TTL), timeout=TTL * 5)
    waited = time.monotonic() - started
    assert TTL <= waited < TTL * 3, waited
    assert successor.term == dead.term + 1
    # The dead leader, waking up, finds its renewal refused and stops acting.
    why = await asyncio.wait_for(dead.keep(), timeout=TTL * 3)
    assert "taken over" in why


async def test_a_renewing_leader_is_never_taken_over(bus: Bus) -> None:
    await ensure_streams(bus)
    leader = await Leadership.acquire(bus, "scheduler", "pod-a", ttl=TTL)
    keeping = asyncio.create_task(leader.keep())
    try:
        contender = asyncio.create_task(Leadership.acquire(bus, "scheduler", "pod-b", ttl=TTL))
        done, _ = await asyncio.wait({contender, keeping}, timeout=TTL * 4)
        assert not done, "the lease changed hands while its holder renewed it"
        contender.cancel()
    finally:
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
