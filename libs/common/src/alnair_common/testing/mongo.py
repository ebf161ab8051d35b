"""A MongoDB-wire server for tests: FerretDB v1 over SQLite.

MongoDB itself cannot be installed on the CI machines; FerretDB speaks the same wire
protocol to the same driver (pymongo), so the profiler's store code runs unchanged against
it. Version 1 keeps its data in SQLite files and needs no other server (version 2 needs
PostgreSQL with the DocumentDB extension). Known gaps of FerretDB v1 that tests hit first:
no change streams, no transactions, a subset of aggregation stages.

One server serves the whole session; each test gets its own database, dropped afterwards.
Database names follow FerretDB's rule ``^[a-zA-Z0-9_-]{1,63}$``.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._server_process import ServerProcess
from .testbin import Testbin

START_TIMEOUT_SECONDS = 30.0


@dataclass
class MongoServer:
    """A running FerretDB and its connection string (no database in it)."""

    url: str
    process: ServerProcess

    def client(self) -> MongoClient:
        """A new pymongo client; the caller closes it."""
        return MongoClient(self.url, serverSelectionTimeoutMS=5000, connect=False)

    def stop(self) -> None:
        self.process.stop()


@dataclass
class MongoDatabase:
    """What a test gets: a database of its own, a client, and a URL naming the database."""

    name: str
    url: str
    client: MongoClient
    db: Database


def start_mongo(testbin: Testbin, workdir: Path, *,
                timeout: float = START_TIMEOUT_SECONDS) -> MongoServer:
    """Start FerretDB with the SQLite backend on a free port; wait until it answers ping."""
    data = workdir / "sqlite"
    data.mkdir(parents=True, exist_ok=True)
    port, debug_port = free_port(), free_port()
    process = ServerProcess("ferretdb", [
        testbin.path("ferretdb"),
        "--handler=sqlite",
        f"--sqlite-url=file:{data}/",
        f"--listen-addr={LOOPBACK}:{port}",
        f"--state-dir={workdir}",
        f"--debug-addr={LOOPBACK}:{debug_port}",
        "--telemetry=disable",
        "--log-level=warn",
    ], workdir / "ferretdb.log")
    server = MongoServer(f"mongodb://{LOOPBACK}:{port}/", process)
    try:
        poll_until(lambda: _answers_ping(server.url), what=f"FerretDB ping at {server.url}",
                   timeout=timeout, process=process)
    except BaseException:
        process.stop()
        raise
    return server


def database_name_for(test_name: str) -> str:
    """A fresh database name that still says which test made it."""
    slug = re.sub(r"[^a-zA-Z0-9_]+", "_", test_name).strip("_")[:48]
    return f"t_{slug or 'test'}_{secrets.token_hex(3)}"


def _answers_ping(url: str) -> bool:
    probe: MongoClient = MongoClient(url, serverSelectionTimeoutMS=300, connectTimeoutMS=300)
    try:
        return bool(probe.admin.command("ping").get("ok"))
    except PyMongoError:
        return False
    finally:
        probe.close()
