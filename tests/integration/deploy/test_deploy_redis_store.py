"""The bundle's Redis Cluster on real redis-servers: the StatefulSet's start script and the
bootstrap Job's script, run verbatim with the environment the manifests give them.

Only what Kubernetes provides is stood in for: the servers listen on loopback ports instead
of pod IPs, and each announces 127.0.0.1 as its DNS name (``ANNOUNCE_HOSTNAME``; in the
cluster it is ``<pod>.alnair-redis``). A pod that comes back with a new IP is played by
rewriting the addresses in its nodes.conf to an unreachable one before it restarts.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from deploy_render import K8S, find, main_container, pod_spec, render
from prometheus_client import REGISTRY

from alnair_cache_hydrator._tier_stats import TierStats
from alnair_common.natsd import free_port
from alnair_common.testing import wait_until
from alnair_common.testing.testbin import locate
from alnair_dataset import connect, open_tier

PASSWORD = "alnair-dev-password"  # the dev overlay's generated value
SCRIPTS = K8S / "base" / "redis"
GONE = "10.255.255.1"  # an address nothing answers on


@dataclass
class Server:
    port: int
    data: Path
    process: subprocess.Popen[str] | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def env_of(container: dict, **extra: str) -> dict[str, str]:
    """The container's literal environment, the Secret's values, and the test binaries."""
    testbin = locate()
    env = {**os.environ, "PATH": f"{testbin.directory}:{os.environ['PATH']}"}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var.get("valueFrom", {}).get("secretKeyRef", {}).get("key") == "redis-password":
            env[var["name"]] = PASSWORD
    env.update(extra)
    return env


def cluster_ports(count: int) -> list[int]:
    """Ports whose cluster-bus port (+10000) is free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port + 10000 < 65536 and port not in ports:
            ports.append(port)
    return ports


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    made = [Server(port, tmp_path / f"redis-{i}") for i, port in enumerate(cluster_ports(3))]
    for s in made:
        s.data.mkdir()
    try:
        yield made
    finally:
        for s in made:
            stop(s)


def start(server: Server, index: int) -> None:
    sts = find(render("dev"), "StatefulSet", "alnair-redis")
    container = main_container(sts)
    assert container["command"] == ["sh", "/opt/alnair/redis-cluster-start.sh"]
    env = env_of(container, POD_NAME=f"alnair-redis-{index}", DATA_DIR=str(server.data),
                 REDIS_PORT=str(server.port), ANNOUNCE_HOSTNAME="127.0.0.1")
    server.process = subprocess.Popen(
        ["sh", str(SCRIPTS / "redis-cluster-start.sh"), "--bind", "127.0.0.1"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    probe = container["readinessProbe"]["exec"]["command"]
    command = probe[2].replace("redis-cli ping", f"redis-cli -p {server.port} ping")

    def ready() -> bool:
        assert server.process is not None
        if server.process.poll() is not None:
            out = server.process.stdout.read() if server.process.stdout else ""
            raise AssertionError(f"redis-server refused the bundle's start script:\n{out}")
        return subprocess.run(["sh", "-c", command], env=env, capture_output=True,
                              timeout=10).returncode == 0

    wait_until(ready, timeout=20, what=f"server {index} passes its readiness probe")


def stop(server: Server) -> None:
    if server.process is None:
        return
    server.process.terminate()
    server.process.wait(10)
    if server.process.stdout is not None:
        server.process.stdout.close()
    server.process = None


def bootstrap(servers: list[Server]) -> subprocess.CompletedProcess[str]:
    job = find(render("dev"), "Job", "alnair-redis-bootstrap")
    container = pod_spec(job)["containers"][0]
    assert container["command"] == ["sh", "/opt/alnair/redis-cluster-bootstrap.sh"]
    listed = container_env(container)["REDIS_NODES"].split()
    assert listed == [f"alnair-redis-{i}.alnair-redis:6379" for i in range(3)], \
        "the Job must list every server of the StatefulSet"
    env = env_of(container, REDIS_NODES=" ".join(s.addr for s in servers), WAIT_SECONDS="60")
    return subprocess.run(["sh", str(SCRIPTS / "redis-cluster-bootstrap.sh")], env=env,
                          capture_output=True, text=True, timeout=120)


def container_env(container: dict) -> dict[str, str]:
    return {v["name"]: v["value"] for v in container["env"] if "value" in v}


def state(server: Server) -> str:
    with redis.Redis(port=server.port, password=PASSWORD) as client:
        return str(client.execute_command("CLUSTER", "INFO")).split("cluster_state:")[1][:2]


def linked(server: Server) -> bool:
    """Whether the server's cluster bus reaches every peer at its current address (a cluster
    whose bus is cut still says "ok" and serves clients: no majority can mark a node failed)."""
    with redis.Redis(port=server.port, password=PASSWORD, decode_responses=True) as client:
        lines = client.execute_command("CLUSTER", "NODES").strip().splitlines()
    return len(lines) == 3 and all(" connected" in line and GONE not in line for line in lines)


def test_the_bundle_forms_a_password_protected_cluster_once_and_the_tier_spreads_over_it(
        servers: list[Server]) -> None:
    for i, s in enumerate(servers):
        start(s, i)
    first = bootstrap(servers)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "creating the cluster over 3 servers" in first.stdout
    again = bootstrap(servers)  # the Job run again (a re-apply): nothing to do
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cluster exists (16384 slots assigned)" in again.stdout
    assert "creating" not in again.stdout
    with redis.Redis(port=servers[0].port) as anonymous, pytest.raises(redis.AuthenticationError):
        anonymous.ping()

    # The hydrator's URL form (redis-cluster://:password@server,...) reaches every master.
    client = connect(f"redis-cluster://:{PASSWORD}@{','.join(s.addr for s in servers)}")
    for i in range(300):
        client.set(f"chunk-{i}", b"x" * 64)
    sizes = []
    for s in servers:
        with redis.Redis(port=s.port, password=PASSWORD) as one:
            sizes.append(one.dbsize())
            assert one.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert one.config_get("appendonly") == {"appendonly": "yes"}
    assert sum(sizes) == 300 and min(sizes) > 50, sizes
    client.close()


def test_the_hit_ratio_panel_counts_lookups_on_every_server_of_the_cluster(
        servers: list[Server]) -> None:
    for i, s in enumerate(servers):
        start(s, i)
    assert bootstrap(servers).returncode == 0
    url = f"redis-cluster://:{PASSWORD}@{','.join(s.addr for s in servers)}"
    stats = TierStats(lambda: open_tier(url, budget_bytes=1 << 30, prefix="t"), url)
    stats.refresh()  # the baseline: what the servers counted before
    hits, misses = sample("alnair_cache_tier_hits_total"), sample("alnair_cache_tier_misses_total")
    client = connect(url)
    for i in range(90):
        client.set(f"chunk-{i}", b"x")
    for i in range(90):
        assert client.get(f"chunk-{i}") == b"x"
    for i in range(30):
        assert client.get(f"absent-{i}") is None
    client.close()
    stats.refresh()
    assert sample("alnair_cache_tier_hits_total") - hits == 90
    assert sample("alnair_cache_tier_misses_total") - misses == 30
    assert sample("alnair_cache_tier_budget_bytes") == 1 << 30


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_servers_that_all_come_back_with_new_addresses_find_each_other(
        servers: list[Server]) -> None:
    for i, s in enumerate(servers):
        start(s, i)
    formed = bootstrap(servers)
    assert formed.returncode == 0, formed.stdout + formed.stderr
    for s in servers:
        stop(s)
    # Every pod rescheduled: the addresses its nodes.conf holds answer no more.
    for s in servers:
        conf = s.data / "nodes.conf"
        text = conf.read_text()
        assert ",127.0.0.1" in text, "each server's announced name is kept in nodes.conf"
        conf.write_text(re.sub(r"127\.0\.0\.1:(\d+@\d+)", rf"{GONE}:\1", text))
    for i, s in enumerate(servers):
        start(s, i)
    wait_until(lambda: all(linked(s) and state(s) == "ok" for s in servers), timeout=30,
               what="the restarted servers linked to each other again")
    again = bootstrap(servers)
    assert again.returncode == 0 and "cluster exists" in again.stdout, again.stdout + again.stderr
