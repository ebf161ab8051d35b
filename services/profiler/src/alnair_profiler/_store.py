"""Where profiles live: MongoDB, or an embedded document store for local mode.

One code path for both. :class:`ProfileStore` speaks the pymongo collection API (``replace_one``
with ``upsert``, ``find`` with MongoDB query documents, ``sort``, ``delete_one``) and is
handed either a pymongo database (a MongoDB server, or FerretDB in the tests) or a
MontyDB database. MontyDB was chosen for the embedded default because it implements that same
API and query language in pure Python over SQLite — no server, no native build, maintained —
so the queries written for MongoDB run unchanged on a laptop, and ``alnair profile`` reads
the same records whichever backend wrote them. (Mongita offers the same idea but has not been
released since 2023; TinyDB has its own query language, which would mean two code paths.)

Three collections: ``<name>`` (one record per workload, ``_id`` = uid), ``<name>_owners``
(one per owner, ``_id`` = owner uid) and ``<name>_inflight`` (checkpoints of running
workloads, deleted when their profile is written). Every failure to reach the store becomes
:class:`StoreUnavailableError`, a temporary error: callers keep the record and try again.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from pymongo import ASCENDING, DESCENDING, MongoClient
from pymongo.errors import PyMongoError

from alnair_common import TemporaryError

from ._errors import ProfilerError

R = TypeVar("R")


class StoreUnavailableError(ProfilerError, TemporaryError):
    """The document store did not answer or refused a write; retry later."""


class ProfileStore:
    def __init__(self, db: Any, collection: str, *, client: Any = None, description: str = "") -> None:
        self.db = db
        self.profiles = db[collection]
        self.owners = db[f"{collection}_owners"]
        self.inflight = db[f"{collection}_inflight"]
        self.description = description or collection
        self._client = client
        self._collection_names = (collection, f"{collection}_owners", f"{collection}_inflight")
        # One thread for every call: the drivers block, and the embedded store's SQLite
        # connection may only be used by the thread that opened it.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="profile-store")

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        """Run a blocking store method on the store's own thread."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        except RuntimeError as e:  # executor shut down: the service is stopping
            raise StoreUnavailableError(f"{self.description} is closed: {e}") from e

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PyMongoError as e:
            raise StoreUnavailableError(f"{what} on {self.description} failed: {e}", retry_after=1.0) from e
        except sqlite3.Error as e:  # the embedded store's SQLite: locked, disk full, ...
            raise StoreUnavailableError(f"{what} on {self.description} failed: {e!r}") from e
        except Exception as e:  # noqa: BLE001 - the embedded store raises its own tree
            if type(e).__module__.startswith("montydb"):
                raise StoreUnavailableError(f"{what} on {self.description} failed: {e!r}") from e
            raise

    def ensure_indexes(self) -> None:
        """Collections, and indexes on uid, owner and end time (the queries the CLI and
        aggregation run). Creating the collections up front matters for the embedded store,
        whose reads of a collection that is being created by a write can fail."""
        existing = set(self._call("list_collection_names", self.db.list_collection_names))
        for name in self._collection_names:
            if name not in existing:
                self._call(f"create_collection {name}", self.db.create_collection, name)
        for keys in ([("uid", ASCENDING)], [("owners.uid", ASCENDING)], [("finished_at", DESCENDING)],
                     [("name", ASCENDING)]):
            self._call("create_index", self.profiles.create_index, keys)
        self._call("create_index", self.owners.create_index, [("name", ASCENDING)])

    def upsert_profile(self, doc: dict[str, Any]) -> None:
        self._call(f"upsert of profile {doc['_id']}", self.profiles.replace_one,
                   {"_id": doc["_id"]}, doc, upsert=True)

    def get_profile(self, uid: str) -> dict[str, Any] | None:
        return self._call(f"read of profile {uid}", self.profiles.find_one, {"_id": uid})

    def profiles_of_owner(self, owner_uid: str) -> list[dict[str, Any]]:
        return self._call(f"query of owner {owner_uid}",
                          lambda: list(self.profiles.find({"owners.uid": owner_uid})))

    def profiles_named(self, name: str, limit: int = 20) -> list[dict[str, Any]]:
        return self._call(f"query of name {name}", lambda: list(
            self.profiles.find({"$or": [{"name": name}, {"uid": name}]})
            .sort("finished_at", DESCENDING).limit(limit)))

    def owners_named(self, name: str) -> list[dict[str, Any]]:
        return self._call(f"query of owner name {name}",
                          lambda: list(self.owners.find({"$or": [{"name": name}, {"uid": name}]})))

    def upsert_owner(self, doc: dict[str, Any]) -> None:
        self._call(f"upsert of owner {doc['_id']}", self.owners.replace_one, {"_id": doc["_id"]}, doc,
                   upsert=True)

    def save_inflight(self, doc: dict[str, Any]) -> None:
        self._call(f"checkpoint of {doc['_id']}", self.inflight.replace_one, {"_id": doc["_id"]}, doc,
                   upsert=True)

    def load_inflight(self) -> list[dict[str, Any]]:
        return self._call("read of checkpoints", lambda: list(self.inflight.find({})))

    def delete_inflight(self, uid: str) -> None:
        self._call(f"delete of checkpoint {uid}", self.inflight.delete_one, {"_id": uid})

    def close(self) -> None:
        if self._client is not None:
            self._thread.submit(self._client.close).result(timeout=10)
        self._thread.shutdown(wait=True)


def open_store(*, mongo_url: str | None, database: str, collection: str, embedded_dir: Path,
               timeout_seconds: float = 2.0) -> ProfileStore:
    """MongoDB when ``mongo_url`` is set, else the embedded store under ``embedded_dir``."""
    if mongo_url:
        ms = int(timeout_seconds * 1000)
        client: Any = MongoClient(mongo_url, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms,
                                  socketTimeoutMS=ms * 5, connect=False, tz_aware=True)
        host = mongo_url.split("@")[-1]
        return ProfileStore(client[database], collection, client=client,
                            description=f"MongoDB {host} {database}.{collection}")
    from montydb import MontyClient, set_storage

    embedded_dir.mkdir(parents=True, exist_ok=True)
    if not (embedded_dir / "monty.storage.cfg").exists():
        set_storage(str(embedded_dir), storage="sqlite", use_bson=True)
    client = MontyClient(str(embedded_dir))
    return ProfileStore(client[database], collection, client=client,
                        description=f"embedded store {embedded_dir} {database}.{collection}")
