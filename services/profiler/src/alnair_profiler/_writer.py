"""Writes profiles and owner aggregates, and keeps them while the store is away.

Why a spool on disk: a finished workload's samples exist nowhere else (the metrics subjects
are not durable), so once its profile is computed it must survive a MongoDB outage *and* a
profiler restart during that outage. Each profile waiting for the store is a JSON file
(BSON extended JSON, so dates round-trip) in the spool directory; the retry loop writes it,
recomputes its owners' aggregates, and only then deletes the file.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from bson import json_util

from alnair_common import get_logger

from ._domain import Owner
from ._profile import OwnerProfile
from ._store import ProfileStore, StoreUnavailableError

log = get_logger("alnair.profiler.writer")
OwnerDone = Callable[[OwnerProfile], Awaitable[None]]


class RecordWriter:
    def __init__(self, store: ProfileStore, spool_dir: Path, on_owner: OwnerDone) -> None:
        self.store = store
        self.spool_dir = spool_dir
        self.on_owner = on_owner
        self.pending: dict[str, dict] = {}  # type: ignore[type-arg]
        self._lock = asyncio.Lock()
        spool_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(spool_dir.glob("*.json")):
            try:
                doc = json_util.loads(path.read_text())
            except (OSError, ValueError) as e:
                log.error("unreadable spooled profile kept aside", path=str(path), error=str(e))
                path.rename(path.with_suffix(".bad"))
                continue
            self.pending[doc["_id"]] = doc
        if self.pending:
            log.info("profiles waiting from before the restart", count=len(self.pending))

    def is_pending(self, uid: str) -> bool:
        return uid in self.pending

    async def submit(self, doc: dict) -> bool:  # type: ignore[type-arg]
        """Write now if the store answers, else spool. True when written."""
        self.pending[doc["_id"]] = doc
        self._spool(doc)
        return await self.flush_one(doc["_id"])

    async def flush(self) -> int:
        """Try every waiting profile once; return how many are still waiting."""
        for uid in list(self.pending):
            if not await self.flush_one(uid):
                break  # the store is away; do not hammer it with the rest
        return len(self.pending)

    async def flush_one(self, uid: str) -> bool:
        async with self._lock:
            doc = self.pending.get(uid)
            if doc is None:
                return True
            try:
                await self.store.run(self.store.upsert_profile, doc)
                owners = []
                for o in doc.get("owners", []):
                    records = await self.store.run(self.store.profiles_of_owner, o["uid"])
                    owners.append(OwnerProfile.aggregate(Owner(**o), records))
                for owner in owners:
                    await self.store.run(self.store.upsert_owner, owner.to_doc())
                await self.store.run(self.store.delete_inflight, uid)
            except StoreUnavailableError as e:
                log.warning("store unavailable; profile kept and retried", uid=uid, name=doc.get("name"),
                            waiting=len(self.pending), error=str(e))
                return False
            self.pending.pop(uid, None)
            self._unspool(uid)
        for owner in owners:
            await self.on_owner(owner)
        log.info("profile written", uid=uid, name=doc.get("name"), owners=len(owners))
        return True

    def _path(self, uid: str) -> Path:
        return self.spool_dir / f"{uid.replace('/', '_')}.json"

    def _spool(self, doc: dict) -> None:  # type: ignore[type-arg]
        path = self._path(doc["_id"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json_util.dumps(doc))
        os.replace(tmp, path)

    def _unspool(self, uid: str) -> None:
        try:
            self._path(uid).unlink()
        except FileNotFoundError:
            pass
