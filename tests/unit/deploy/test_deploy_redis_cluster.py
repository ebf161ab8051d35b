"""The Redis Cluster's manifests agree with each other and with the hydrator that uses it."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from deploy_render import K8S, OVERLAYS, find, main_container, pod_spec, render


def scripts_volume(spec: dict) -> str:
    (volume,) = [v for v in spec["volumes"] if v["name"] == "scripts"]
    return volume["configMap"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_servers_bootstrap_and_hydrator_name_the_same_servers(overlay: str) -> None:
    docs = render(overlay)
    sts = find(docs, "StatefulSet", "alnair-redis")
    servers = [f"alnair-redis-{i}.alnair-redis:6379" for i in range(sts["spec"]["replicas"])]
    assert len(servers) >= 3, "a Redis Cluster needs at least three masters"
    job = pod_spec(find(docs, "Job", "alnair-redis-bootstrap"))["containers"][0]
    job_env = {v["name"]: v.get("value") for v in job["env"]}
    assert job_env["REDIS_NODES"].split() == servers
    hydrator = main_container(find(docs, "Deployment", "alnair-cache-hydrator"))
    url = {v["name"]: v.get("value") for v in hydrator["env"]}["ALNAIR_CACHE_TIER_URL"]
    parsed = urlparse(url)
    assert parsed.scheme == "redis-cluster"
    assert parsed.netloc.rpartition("@")[2].split(",") == servers
    assert parsed.netloc.startswith(":$(REDIS_PASSWORD)@"), "the cluster requires the password"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_servers_are_addressable_before_ready_and_run_the_shipped_scripts(overlay: str) -> None:
    docs = render(overlay)
    service = find(docs, "Service", "alnair-redis")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"redis": 6379,
                                                                        "cluster-bus": 16379}
    sts = find(docs, "StatefulSet", "alnair-redis")
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    server = main_container(sts)
    assert server["readinessProbe"]["exec"] and server["livenessProbe"]["tcpSocket"]
    job = find(docs, "Job", "alnair-redis-bootstrap")
    bootstrap = pod_spec(job)["containers"][0]
    assert bootstrap["image"] == server["image"], "redis-cli must match the servers' version"
    repo, _, tag = server["image"].rpartition(":")
    assert repo and tag[0].isdigit(), f"{server['image']} is not pinned"
    name = scripts_volume(pod_spec(sts))
    assert scripts_volume(pod_spec(job)) == name
    config = find(docs, "ConfigMap", name)
    shipped = {p.name: p.read_text() for p in (K8S / "base" / "redis").glob("*.sh")}
    assert config["data"] == shipped
    for container, script in ((server, "redis-cluster-start.sh"),
                              (bootstrap, "redis-cluster-bootstrap.sh")):
        assert container["command"] == ["sh", f"/opt/alnair/{script}"]
        assert container["securityContext"]["readOnlyRootFilesystem"]
