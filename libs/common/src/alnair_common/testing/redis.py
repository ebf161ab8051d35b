"""A real redis-server for tests, configured as Alnair's deployment configures it.

The server is a cache, so it runs without persistence and with a memory ceiling and an
LRU eviction policy: tests see evictions behave as they will in the cluster rather than an
unbounded store. One server serves the session; each test gets its own logical database,
flushed before the test, plus a key prefix for code that must share database 0.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass
from pathlib import Path

import redis as redis_py

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._server_process import ServerProcess
from .testbin import Testbin

START_TIMEOUT_SECONDS = 20.0
DATABASES = 64
"""Logical databases the server offers; tests cycle through 1..63 (0 stays shared)."""
MAXMEMORY = "128mb"
EVICTION_POLICY = "allkeys-lru"


@dataclass
class RedisServer:
    """A running redis-server; ``url(db)`` names one of its logical databases."""

    host: str
    port: int
    process: ServerProcess

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    def client(self, db: int = 0) -> redis_py.Redis:
        """A new client with ``str`` replies; the caller closes it."""
        return redis_py.Redis(host=self.host, port=self.port, db=db, decode_responses=True)

    def stop(self) -> None:
        self.process.stop()


@dataclass
class RedisDatabase:
    """What a test gets: an empty logical database, a client on it, and a key prefix."""

    server: RedisServer
    db: int
    url: str
    prefix: str
    client: redis_py.Redis


def start_redis(testbin: Testbin, workdir: Path, *,
                timeout: float = START_TIMEOUT_SECONDS) -> RedisServer:
    """Start redis-server on a free loopback port; wait until it answers PING."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = ServerProcess("redis-server", [
        testbin.path("redis-server"),
        "--bind", LOOPBACK,
        "--port", str(port),
        "--dir", str(workdir),
        "--save", "",
        "--appendonly", "no",
        "--databases", str(DATABASES),
        "--maxmemory", MAXMEMORY,
        "--maxmemory-policy", EVICTION_POLICY,
        "--protected-mode", "yes",
        "--daemonize", "no",
        "--loglevel", "warning",
    ], workdir / "redis.log")
    server = RedisServer(LOOPBACK, port, process)
    try:
        poll_until(lambda: answers_ping(server.host, server.port), what=f"redis PING on port {port}",
                   timeout=timeout, process=process)
    except BaseException:
        process.stop()
        raise
    return server


class DatabaseAllocator:
    """Hands out logical databases 1..DATABASES-1 in turn, flushing each before use."""

    def __init__(self, server: RedisServer) -> None:
        self._server = server
        self._next = itertools.cycle(range(1, DATABASES))

    def allocate(self) -> RedisDatabase:
        db = next(self._next)
        client = self._server.client(db)
        client.flushdb()
        return RedisDatabase(self._server, db, self._server.url(db),
                             f"t{secrets.token_hex(3)}:", client)


def answers_ping(host: str, port: int) -> bool:
    """Whether a redis-server (single or a cluster node) answers PING on ``host:port``."""
    probe = redis_py.Redis(host=host, port=port, socket_connect_timeout=0.5,
                           socket_timeout=0.5)
    try:
        return bool(probe.ping())
    except redis_py.ConnectionError:
        return False
    finally:
        probe.close()
