"""Redis as the dataset cache runs it: a server per test, or a Redis Cluster of several.

The shared ``redis`` fixture (:mod:`.redis`) is one session-wide server with LRU eviction,
right for code that treats Redis as a throw-away cache. The dataset cache tier is different:
it keeps its own byte budget and reference counts, so Redis must never drop a key behind
its back (``noeviction``: a full server refuses a write, which the tier reports), and its
tests kill servers on purpose, so each test gets servers of its own.

A cluster is built the way an operator would, minus ``redis-cli --cluster create``: each
server starts with cluster mode on, the 16384 hash slots are split evenly with
``CLUSTER ADDSLOTSRANGE``, the servers ``CLUSTER MEET`` the first one, and the fixture waits
until every server reports ``cluster_state:ok``. No replicas: a killed server loses its
slots, which is exactly the failure the tier's readers must survive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

import redis as redis_py
from redis.cluster import ClusterNode, RedisCluster

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._server_process import ServerProcess
from .redis import answers_ping
from .testbin import Testbin

START_TIMEOUT_SECONDS = 20.0
SLOTS = 16384
TIER_MAXMEMORY = "512mb"
CLUSTER_BUS_OFFSET = 10000


@dataclass
class RedisNode:
    """One redis-server of a test; ``url`` is what a tier client is given."""

    host: str
    port: int
    process: ServerProcess

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self) -> redis_py.Redis:
        return redis_py.Redis(host=self.host, port=self.port)

    def kill(self) -> None:
        """Stop the server at once (SIGKILL of its group): the loss a reader must survive."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.stop(grace_seconds=5.0)  # reaps it


def start_redis_node(testbin: Testbin, workdir: Path, *, maxmemory: str = TIER_MAXMEMORY,
                     cluster: bool = False, port: int | None = None, io_threads: int = 1,
                     timeout: float = START_TIMEOUT_SECONDS) -> RedisNode:
    """Start one redis-server without persistence and without eviction; wait for PING.
    ``io_threads`` > 1 writes replies on that many threads (``--io-threads``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or (_cluster_port() if cluster else free_port())
    argv: list[str | Path] = [
        testbin.path("redis-server"), "--bind", LOOPBACK, "--port", str(port),
        "--dir", str(workdir), "--save", "", "--appendonly", "no",
        "--maxmemory", maxmemory, "--maxmemory-policy", "noeviction",
        "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning",
    ]
    if io_threads > 1:
        argv += ["--io-threads", str(io_threads)]
    if cluster:
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", str(workdir / "nodes.conf"),
                 "--cluster-node-timeout", "2000"]
    process = ServerProcess(f"redis-server:{port}", argv, workdir / "redis.log")
    node = RedisNode(LOOPBACK, port, process)
    try:
        poll_until(lambda: answers_ping(node.host, node.port), what=f"redis PING on port {port}",
                   timeout=timeout, process=process)
    except BaseException:
        process.stop()
        raise
    return node


@dataclass
class RedisClusterPlane:
    """Several cluster-mode servers sharing the slots; ``client()`` is a cluster client."""

    nodes: list[RedisNode]
    _clients: list[RedisCluster] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` style seed the tier understands: any node finds the rest."""
        return f"redis-cluster://{self.nodes[0].host}:{self.nodes[0].port}"

    def client(self) -> RedisCluster:
        client = RedisCluster(startup_nodes=[ClusterNode(n.host, n.port) for n in self.nodes])
        self._clients.append(client)
        return client

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        for node in self.nodes:
            node.process.stop(grace_seconds=2.0)


def start_redis_cluster(testbin: Testbin, workdir: Path, *, masters: int = 3,
                        maxmemory: str = TIER_MAXMEMORY,
                        timeout: float = START_TIMEOUT_SECONDS) -> RedisClusterPlane:
    """Start ``masters`` servers and join them into one cluster owning all 16384 slots."""
    nodes: list[RedisNode] = []
    try:
        for i in range(masters):
            nodes.append(start_redis_node(testbin, workdir / f"node-{i}", maxmemory=maxmemory,
                                          cluster=True, timeout=timeout))
        per = SLOTS // masters
        for i, node in enumerate(nodes):
            first, last = i * per, SLOTS - 1 if i == masters - 1 else (i + 1) * per - 1
            with node.client() as c:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
                if i:
                    c.execute_command("CLUSTER", "MEET", nodes[0].host, nodes[0].port)
        for node in nodes:
            poll_until(lambda node=node: _cluster_ok(node, masters),
                       what=f"cluster_state:ok on redis port {node.port}", timeout=timeout,
                       process=node.process, retry_on=(OSError, redis_py.RedisError))
    except BaseException:
        for node in nodes:
            node.process.stop(grace_seconds=1.0)
        raise
    return RedisClusterPlane(nodes)


def _cluster_port() -> int:
    """A free port that can also carry the cluster bus, which Redis puts 10000 above it."""
    for _ in range(200):
        port = free_port()
        if port > 65535 - CLUSTER_BUS_OFFSET:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((LOOPBACK, port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port
    raise OSError("no free port pair (p, p+10000) for a cluster-mode redis-server")


def _cluster_ok(node: RedisNode, masters: int) -> bool:
    with node.client() as c:
        info = c.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
    return fields.get("cluster_state") == "ok" and fields.get("cluster_known_nodes") == str(masters)


