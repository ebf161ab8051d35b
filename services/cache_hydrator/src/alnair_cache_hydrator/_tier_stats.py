"""The tier's size and lookups as Prometheus sees them, refreshed on a timer.

Size comes from the tier's own accounting (``usage()``), so a restarted hydrator shows it
before its first hydration. Lookups are the Redis servers' ``keyspace_hits`` and
``keyspace_misses`` summed over every server of the tier: every read of a key — data clients
reading manifests and chunks, the hydrator checking what is stored — counts, so their
ratio is the tier's hit ratio, not one reader's. A server that restarted (its counters went
back) adds what it counted since. A directory tier has no such counters: only its size is
shown. A tier that does not answer leaves the values as they were (the hydration's own
status says the tier is down).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from alnair_common import get_logger
from alnair_dataset import CacheTier, DatasetError, connect

from ._metrics import TIER_BUDGET, TIER_HITS, TIER_MISSES, TIER_STORED

log = get_logger("alnair.cache-hydrator")


class TierStats:
    def __init__(self, tier: Callable[[], CacheTier], tier_url: str) -> None:
        self._tier = tier
        self._url = tier_url if tier_url.startswith(("redis://", "rediss://", "redis-cluster://")) else ""
        self._client: Any = None
        self._last: dict[str, tuple[int, int]] = {}

    def refresh(self) -> None:
        """One reading (blocking: run it on a thread). Reading the usage is itself a few
        hundred lookups: the counters are read before and after it, and what it added is
        left out, so an idle tier does not show this reading as its traffic."""
        counted = self._lookups(count=True)
        try:
            usage = self._tier().usage()
            TIER_STORED.set(usage.stored_bytes)
            TIER_BUDGET.set(usage.budget_bytes)
        except (DatasetError, OSError) as e:
            log.debug("tier usage not read", error=str(e))
        if counted:
            self._lookups(count=False)

    def _lookups(self, *, count: bool) -> bool:
        if not self._url:
            return False
        try:
            self._count(self._servers(), count=count)
            return True
        except Exception as e:  # noqa: BLE001 - a tier that is down is not our failure
            log.debug("tier lookups not read", error=str(e))
            self._client = None
            return False

    def _servers(self) -> dict[str, dict[str, Any]]:
        if self._client is None:
            self._client = connect(self._url)
        info = self._client.info("stats", target_nodes="all") if self._url.startswith(
            "redis-cluster://") else {"server": self._client.info("stats")}
        return {name: stats for name, stats in info.items() if isinstance(stats, dict)}

    def _count(self, servers: dict[str, dict[str, Any]], *, count: bool) -> None:
        for name, stats in servers.items():
            hits, misses = int(stats.get("keyspace_hits", 0)), int(stats.get("keyspace_misses", 0))
            old_hits, old_misses = self._last.get(name, (0, 0))
            if count:
                # Counters that went back belong to a restarted server: all it counted is new.
                TIER_HITS.inc(hits - old_hits if hits >= old_hits else hits)
                TIER_MISSES.inc(misses - old_misses if misses >= old_misses else misses)
            self._last[name] = (hits, misses)

    async def follow(self, interval: float) -> None:
        while True:
            await asyncio.to_thread(self.refresh)
            await asyncio.sleep(interval)
