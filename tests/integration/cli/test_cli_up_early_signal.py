"""`alnair up` stopped while it is still starting: SIGTERM right after its nats-server appears
must stop that server too (it runs in its own session, so nothing else would)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_support import ALNAIR, nats_server_pids

from alnair_common.natsd import free_port


@pytest.mark.timeout(120)
def test_sigterm_while_starting_stops_the_nats_server(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port), "--gpus", "sim:1x80"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not nats_server_pids(port):  # the earliest moment a leak is possible
            assert up.poll() is None and time.monotonic() < deadline, "no nats-server started"
            time.sleep(0.002)
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0  # a stop it handled, not death by the signal
        deadline = time.monotonic() + 10
        while nats_server_pids(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert nats_server_pids(port) == [], "nats-server outlived `alnair up`"
        assert not (data_dir / "run" / "platform.json").exists()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        for pid in nats_server_pids(port):
            os.kill(pid, signal.SIGKILL)
