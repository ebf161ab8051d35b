"""Redis as the bundle starts it: the StatefulSet's arguments on the real redis-server.

The kubelet's $(REDIS_PASSWORD) expansion is done here as the kubelet does it; only the
port and the data directory (the pod's volume) differ. The readiness probe's command is
then run verbatim, and a client without the password is refused.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import redis
from deploy_render import find, main_container, render

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until
from alnair_common.testing.testbin import locate

PASSWORD = "alnair-dev-password"  # the dev overlay's generated value


def test_redis_runs_with_the_bundle_arguments_and_requires_the_password(tmp_path: Path) -> None:
    container = main_container(find(render("dev"), "StatefulSet", "alnair-redis"))
    args = [re.sub(r"\$\(REDIS_PASSWORD\)", PASSWORD, a) for a in container["args"]]
    assert args[args.index("--dir") + 1] == "/data"
    args[args.index("--dir") + 1] = str(tmp_path)
    port = free_port()
    testbin = locate()
    process = subprocess.Popen([str(testbin.path("redis-server")), *args, "--port", str(port),
                                "--bind", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        probe = container["readinessProbe"]["exec"]["command"]
        assert probe[:2] == ["sh", "-c"]
        env = {**os.environ, "REDIS_PASSWORD": PASSWORD,
               "PATH": f"{testbin.directory}:{os.environ['PATH']}"}
        command = probe[2].replace("redis-cli ping", f"redis-cli -p {port} ping")

        def probe_passes() -> bool:
            assert process.poll() is None, f"redis-server refused the bundle's arguments:\n{process.stdout.read()}"
            return subprocess.run(["sh", "-c", command], env=env, capture_output=True, timeout=10).returncode == 0

        wait_until(probe_passes, timeout=20, what="the readiness probe passes")
        with redis.Redis(port=port) as anonymous, pytest.raises(redis.AuthenticationError):
            anonymous.ping()
        with redis.Redis(port=port, password=PASSWORD) as client:
            assert client.config_get("appendonly") == {"appendonly": "yes"}
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert int(client.config_get("maxmemory")["maxmemory"]) == 400 * 1024 * 1024
    finally:
        process.terminate()
        process.wait(10)
        assert process.stdout is not None
        process.stdout.close()
