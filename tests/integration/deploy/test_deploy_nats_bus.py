"""The bus as the bundle configures it: the rendered nats.conf, run by the real nats-server.

Only what cannot exist outside a pod is overridden on the command line (ports, store and
pid file paths); the token, JetStream and the server name come from the ConfigMap and the
environment exactly as the StatefulSet provides them. A service configured with the
environment of its Deployment then connects with the token and becomes ready, and a
client without the token is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_render import find, main_container, render
from test_deploy_manifests import mounted_config

from alnair_common import Bus, ensure_streams
from alnair_common.natsd import free_port, nats_server_binary
from alnair_common.testing import wait_until

TOKEN = "alnair-dev-token"  # the dev overlay's generated value


def read_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except OSError:
        return None


@pytest.fixture
def bundle_nats(tmp_path: Path) -> Iterator[tuple[str, int]]:
    docs = render("dev")
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "alnair-nats-config")
    text = config["data"]["nats.conf"]
    for in_pod in ("/data/jetstream", "/var/run/nats/nats.pid"):  # the pod's volumes
        assert in_pod in text, f"nats.conf no longer uses {in_pod}"
        text = text.replace(in_pod, str(tmp_path / Path(in_pod).name))
    (tmp_path / "nats.conf").write_text(text)
    port, monitor = free_port(), free_port()
    env = {**os.environ, "POD_NAME": "alnair-nats-0", "NATS_TOKEN": TOKEN}
    process = subprocess.Popen(
        [str(nats_server_binary()), "-c", str(tmp_path / "nats.conf"), "-a", "127.0.0.1", "-p", str(port),
         "-m", str(monitor)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The readiness probe of the StatefulSet, verbatim.
        probe = main_container(find(docs, "StatefulSet", "alnair-nats"))["readinessProbe"]
        wait_until(lambda: process.poll() is not None or http_status(
            f"http://127.0.0.1:{monitor}{probe['httpGet']['path']}") == 200,
            timeout=20, what="nats-server ready with JetStream")
        assert process.poll() is None, f"nats-server refused the bundle's config:\n{process.stdout.read()}"
        yield f"nats://127.0.0.1:{port}", monitor
    finally:
        process.terminate()
        process.wait(10)
        assert process.stdout is not None
        process.stdout.close()


def connect_reply(url: str, token: str | None) -> str:
    """The server's answer to a CONNECT (+PING) at the protocol level: PONG or -ERR."""
    host, port = url.removeprefix("nats://").split(":")
    options = {"verbose": False, "pedantic": False, **({"auth_token": token} if token else {})}
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        reader = conn.makefile("rb")
        assert reader.readline().startswith(b"INFO ")
        conn.sendall(b"CONNECT " + json.dumps(options).encode() + b"\r\nPING\r\n")
        reply = reader.readline().decode().strip()
        reader.close()
        return reply


def test_clients_without_the_token_are_refused(bundle_nats: tuple[str, int]) -> None:
    url, _ = bundle_nats
    assert connect_reply(url, None) == "-ERR 'Authorization Violation'"
    assert connect_reply(url, "wrong") == "-ERR 'Authorization Violation'"
    assert connect_reply(url, TOKEN) == "PONG"


async def test_jetstream_serves_the_platform_streams(bundle_nats: tuple[str, int]) -> None:
    url, monitor = bundle_nats
    bus = await Bus.connect(url, service="deploy-test", token=TOKEN)
    try:
        await ensure_streams(bus)  # creates every stream and KV bucket on the JetStream store
        info = await bus.js.account_info()
        assert info.streams >= 1
    finally:
        await bus.drain()
    varz = await asyncio.to_thread(read_json, f"http://127.0.0.1:{monitor}/varz")
    assert varz["server_name"] == "alnair-nats-0"
    assert varz["jetstream"]["config"]["max_memory"] == 256 * 1024 * 1024


def test_service_with_its_deployment_environment_becomes_ready(bundle_nats: tuple[str, int], tmp_path: Path) -> None:
    url, _ = bundle_nats
    docs = render("dev")
    workload = find(docs, "Deployment", "alnair-scheduler")
    container = main_container(workload)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
    health = free_port()
    env.update({"ALNAIR_NATS_URL": url, "ALNAIR_NATS_TOKEN": TOKEN, "ALNAIR_NODE_NAME": "node-1",
                "ALNAIR_HEALTH_HOST": "127.0.0.1", "ALNAIR_HEALTH_PORT": str(health),
                "ALNAIR_DATA_DIR": str(tmp_path / "data"), "ALNAIR_INSTANCE_ID": "alnair-scheduler-0"})
    env["ALNAIR_CONFIG"] = str(mounted_config(workload, docs, env["ALNAIR_CONFIG"], tmp_path))
    script = Path(sys.executable).parent / container["name"].join(("alnair-", ""))
    process = subprocess.Popen([str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        probe = container["readinessProbe"]["httpGet"]["path"]
        wait_until(lambda: process.poll() is not None or http_status(f"http://127.0.0.1:{health}{probe}") == 200,
                   timeout=30, what="scheduler ready")
        assert process.poll() is None, f"the scheduler exited:\n{process.stdout.read()}"
        assert http_status(f"http://127.0.0.1:{health}{container['livenessProbe']['httpGet']['path']}") == 200
    finally:
        process.terminate()
        process.wait(20)
        assert process.stdout is not None
        process.stdout.close()
    assert process.returncode == 0, f"graceful stop expected, exit {process.returncode}"
