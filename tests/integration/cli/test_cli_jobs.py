"""`alnair job` against `alnair up`: a TrainingJob submitted from a file is taken by the real
elastic-job controller (submit prints its answer), listed, described with its transitions,
scaled and deleted; a bad file, an unknown job or a scale outside min..max is refused with the
reason before anything is sent, and a clash with a live job of the name by the controller."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from cli_support import ALNAIR

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until

JOB = """
apiVersion: alnair.centaurus.io/v1
kind: TrainingJob
metadata: {name: resnet}
spec:
  launcher: torch-elastic
  command: [python, train.py]
  minReplicas: 1
  maxReplicas: 3
  worker: {gpuMemoryGiB: 8, gpuComputePercent: 30}
"""


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ALNAIR, *args, "--data-dir", str(data_dir)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})


@pytest.mark.timeout(240)
def test_submit_list_describe_scale_delete(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),
                           "--gpus", "sim:2x80"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: cli(data_dir, "status", "--json").returncode == 0, timeout=150,
                   interval=1.0, what="every service ready")
        bad = tmp_path / "bad.yaml"
        bad.write_text(JOB.replace("minReplicas: 1", "minReplicas: 5"))
        refused = cli(data_dir, "job", "submit", str(bad))
        assert refused.returncode == 2 and "minReplicas" in refused.stderr, refused.stderr
        assert cli(data_dir, "job", "submit", str(tmp_path / "missing.yaml")).returncode == 2
        unknown = cli(data_dir, "job", "scale", "nope", "2")
        assert unknown.returncode == 2 and "no training job default/nope" in unknown.stderr

        good = tmp_path / "job.yaml"
        good.write_text(JOB)
        submitted = cli(data_dir, "job", "submit", str(good))
        assert submitted.returncode == 0, submitted.stderr
        # The controller's answer, not just "sent": granted at once on the idle cards.
        assert "submitted training job default/resnet, scheduling (WaitingForGang)" in submitted.stdout, \
            submitted.stdout
        again = cli(data_dir, "job", "submit", str(good))
        assert again.returncode == 0 and "already submitted: training job default/resnet" in again.stdout
        other = tmp_path / "other.yaml"
        other.write_text(JOB.replace("maxReplicas: 3", "maxReplicas: 2"))
        clash = cli(data_dir, "job", "submit", str(other))
        assert clash.returncode == 2 and "default/resnet exists and is" in clash.stderr, clash
        too_many = cli(data_dir, "job", "scale", "resnet", "7")
        assert too_many.returncode == 2 and "1..3 workers" in too_many.stderr, too_many

        def listed() -> str | None:
            done = cli(data_dir, "job", "ls")
            return done.stdout if done.returncode == 0 and "resnet" in done.stdout else None

        table = wait_until(listed, timeout=30, what="the job listed")
        assert "default" in table and "1..3" in table
        described = cli(data_dir, "job", "describe", "resnet")
        assert described.returncode == 0, described.stderr
        assert "transitions" in described.stdout and "pending" in described.stdout
        assert cli(data_dir, "job", "scale", "resnet", "2").returncode == 0
        assert cli(data_dir, "job", "delete", "resnet").returncode == 0

        def gone_or_deleting() -> bool:
            out = cli(data_dir, "job", "ls").stdout
            return "resnet" not in out or "delet" in out

        wait_until(gone_or_deleting, timeout=30, what="the job deleting or gone")
        nats_log = (data_dir / "logs" / "nats-server.log").read_text()
        assert "Violation" not in nats_log, [ln for ln in nats_log.splitlines() if "Violation" in ln]
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
