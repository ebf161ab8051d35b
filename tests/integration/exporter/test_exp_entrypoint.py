"""`alnair-exporter` as the supervisor and the DaemonSet start it: a process configured only
through ALNAIR_* variables (here replaying the H200 recording), stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from exporter_harness import SHARE, series

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until


def _env(nats_url: str, tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env.update({"ALNAIR_NATS_URL": nats_url, "ALNAIR_DATA_DIR": str(tmp), "ALNAIR_HEALTH_PORT": "0",
                "ALNAIR_NODE_NAME": "gpu-node-1", "ALNAIR_LOG_FORMAT": "json", **extra})
    return env


def test_the_entrypoint_replays_from_settings_and_stops_on_sigterm(nats_server, tmp_path) -> None:
    port = free_port()
    env = _env(nats_server.url, tmp_path, ALNAIR_GPU_SOURCE="replay", ALNAIR_REPLAY_FILE=str(SHARE),
               ALNAIR_REPLAY_GPUS="2", ALNAIR_METRICS_PORT=str(port), ALNAIR_SAMPLE_PERIOD_SECONDS="0.2")
    proc = subprocess.Popen([sys.executable, "-m", "alnair_exporter"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        def exposition() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                return None
            return text if len(series(text, "alnair_gpu_utilization_ratio")) == 2 else None

        text = wait_until(exposition, timeout=30, what="the replaying exporter's exposition")
        assert series(text, "alnair_exporter_simulated") == {"": 1.0}
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert '"event": "stopped"' in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_bad_setting_exits_2_naming_the_variable(nats_server, tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "alnair_exporter"], capture_output=True, text=True, timeout=60,
                          env=_env(nats_server.url, tmp_path, ALNAIR_GPU_SOURCE="replay"))
    assert done.returncode == 2
    assert "ALNAIR_REPLAY_FILE" in done.stderr


def test_an_unreadable_recording_exits_1_with_the_reason(nats_server, tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "alnair_exporter"], capture_output=True, text=True, timeout=60,
                          env=_env(nats_server.url, tmp_path, ALNAIR_GPU_SOURCE="replay",
                                   ALNAIR_REPLAY_FILE=str(tmp_path / "missing.jsonl.gz")))
    assert done.returncode == 1
    assert "cannot read NVML recording" in done.stdout + done.stderr
