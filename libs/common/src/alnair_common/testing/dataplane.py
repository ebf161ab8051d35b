"""pytest fixtures for the dataset cache: an S3 server, and Redis servers a test may kill.

Import them into a conftest (``from alnair_common.testing.dataplane import *``) or list
the module in ``pytest_plugins``. The S3 server (versitygw, see :mod:`.s3`) starts in a few
milliseconds, so each test gets its own and may change the files behind its objects; each
Redis server or cluster is per test too, because tests of the cache kill them.

Fixtures:
  ``s3_server``      S3Server (per test): ``make_bucket()``, ``client()``, ``root``
  ``redis_node``     factory: ``redis_node(maxmemory="512mb")`` -> RedisNode (killable)
  ``redis_cluster``  factory: ``redis_cluster(masters=3)`` -> RedisClusterPlane
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .redis_cluster import (
    TIER_MAXMEMORY,
    RedisClusterPlane,
    RedisNode,
    start_redis_cluster,
    start_redis_node,
)
from .s3 import S3Server, start_s3
from .testbin import Testbin, locate

__all__ = ["dataplane_bin", "redis_cluster", "redis_node", "s3_server"]


@pytest.fixture(scope="session")
def dataplane_bin() -> Testbin:
    return locate()


@pytest.fixture
def s3_server(dataplane_bin: Testbin, tmp_path: Path) -> Iterator[S3Server]:
    server = start_s3(dataplane_bin, tmp_path / "s3")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_node(dataplane_bin: Testbin, tmp_path: Path) -> Iterator[Callable[..., RedisNode]]:
    started: list[RedisNode] = []

    def start(maxmemory: str = TIER_MAXMEMORY) -> RedisNode:
        node = start_redis_node(dataplane_bin, tmp_path / f"redis-{len(started)}",
                                maxmemory=maxmemory)
        started.append(node)
        return node

    try:
        yield start
    finally:
        for node in started:
            node.process.stop(grace_seconds=2.0)


@pytest.fixture
def redis_cluster(dataplane_bin: Testbin,
                  tmp_path: Path) -> Iterator[Callable[..., RedisClusterPlane]]:
    started: list[RedisClusterPlane] = []

    def start(masters: int = 3, maxmemory: str = TIER_MAXMEMORY) -> RedisClusterPlane:
        plane = start_redis_cluster(dataplane_bin, tmp_path / f"cluster-{len(started)}",
                                    masters=masters, maxmemory=maxmemory)
        started.append(plane)
        return plane

    try:
        yield start
    finally:
        for plane in started:
            plane.stop()
