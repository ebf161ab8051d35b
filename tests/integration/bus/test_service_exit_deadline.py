"""A service process ends within ``shutdown_grace_seconds`` of a stop, whatever it waits on.

Under a killed `alnair up` the parent-death SIGTERM is all a service gets: no SIGKILL follows
it. A shutdown stuck on a bus that died in the middle once kept the scheduler running for
over 30 s; the process has to end itself (exit 1) when its own shutdown does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from alnair_common.natsd import NatsServer

STUCK_SERVICE = """
import asyncio, sys
from alnair_common import Service, run_service

class Stuck(Service):
    name = "stuck"
    role = "test service that never finishes its {where}"

    async def setup(self):
        print("started", flush=True)
        if "{where}" == "setup":
            await asyncio.Event().wait()

    async def teardown(self):
        if "{where}" == "teardown":
            await asyncio.Event().wait()

run_service(Stuck)
"""


def _start(where: str, nats_url: str, grace: float) -> subprocess.Popen[str]:
    env = {**os.environ, "ALNAIR_NATS_URL": nats_url, "ALNAIR_SHUTDOWN_GRACE_SECONDS": str(grace),
           "ALNAIR_HEALTH_PORT": "0", "ALNAIR_LOG_FORMAT": "console"}
    env.pop("ALNAIR_CONFIG", None)
    return subprocess.Popen([sys.executable, "-c", STUCK_SERVICE.format(where=where)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["setup", "teardown"])
def test_a_stuck_shutdown_ends_the_process_after_the_grace(nats_server: NatsServer,
                                                           where: str) -> None:
    proc = _start(where, nats_server.url, grace=1.0)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started", proc.stderr.read() if proc.stderr else ""
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err[-2000:]
    assert 1.0 <= took < 4, f"exited {took:.1f} s after SIGTERM with a 1 s grace"
    assert "shutdown not finished after 1 s" in err, err[-2000:]
