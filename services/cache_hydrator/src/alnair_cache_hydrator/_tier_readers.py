"""Keeps one read-only tier user per namespace that has data sets (``alnair_common.tier_readers``).

Wanted: a user for every namespace of a data set in the hydrator's bucket (whatever its phase:
a pod may start while its data set hydrates). Every round makes each wanted user again (Redis
keeps users in memory per server: a restarted or added server has none until then; remaking
one keeps its readers' connections) and deletes users of namespaces with no data set left.
A round runs on a timer and as soon as a data set is added, so a pod admitted right after its
data set rarely waits a round. A tier that is down, or is not Redis, skips the round: pods
then read their sources, as they would with no cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from alnair_common import BusUnavailableError, get_logger
from alnair_common.tier_readers import USER_PREFIX, reader_password, reader_user
from alnair_dataset import CacheTier, DatasetError

from ._metrics import TIER_READERS

log = get_logger("alnair.cache-hydrator")


class TierReaders:
    def __init__(self, tier: Callable[[], CacheTier], key: str,
                 keys: Callable[[], Awaitable[list[str]]]) -> None:
        self._tier = tier
        self._key = key
        self._keys = keys  # the data sets' keys, "<namespace>.<name>" or "<name>" (local)
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """Run a round now (a data set was added)."""
        self._wake.set()

    async def wanted(self) -> set[str]:
        return {k.partition(".")[0] for k in await self._keys() if "." in k}

    def reconcile(self, namespaces: set[str]) -> set[str]:
        """One round (blocking: run it on a thread); the users it made."""
        tier: Any = self._tier()
        if not hasattr(tier, "grant_reader"):
            return set()
        made = set()
        for namespace in sorted(namespaces):
            try:
                user = reader_user(namespace)
            except ValueError as e:  # local-mode keys are never "<namespace>.<name>"
                log.warning("no tier user for a key that names no namespace", error=str(e))
                continue
            tier.grant_reader(namespace, user, reader_password(self._key, namespace))
            made.add(user)
        for user in tier.readers_granted(USER_PREFIX) - made:
            tier.revoke_reader(user)
            log.info("tier user removed: its namespace has no data set left", user=user)
        TIER_READERS.set(len(made))
        return made

    async def follow(self, interval: float) -> None:
        while True:
            self._wake.clear()
            try:
                await asyncio.to_thread(self.reconcile, await self.wanted())
            except (DatasetError, BusUnavailableError, OSError) as e:
                log.warning("tier users not reconciled; retrying", error=str(e))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
