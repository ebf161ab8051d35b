"""`alnair run` input checks and the request it submits; `alnair ps` rows. No servers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_cli._ps import row
from alnair_cli._run import RunError, RunRequest


@pytest.mark.parametrize(("command", "memory", "compute", "name", "message"), [
    ([], 1, 10, None, "no command given"),
    (["true"], 1, 250, None, "--gpu-compute 250"),
    (["true"], 1, 0, None, "--gpu-compute 0"),
    (["true"], -1, 10, None, "--gpu-memory -1"),
    (["true"], 1, 10, "UPPER", "--name 'UPPER'"),
])
def test_bad_input_is_refused(command, memory, compute, name, message) -> None:
    with pytest.raises(RunError, match=message):
        RunRequest.build(command, memory, compute, name)


def test_request_forwards_the_shell_but_not_alnair_or_gpu_variables_and_not_on_the_bus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VAR", "1")
    monkeypatch.setenv("ALNAIR_NATS_TOKEN", "secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    request = RunRequest.build(["/usr/bin/Python3.11", "x.py"], 8, 30, None)
    assert request.name.startswith("python3-11-") and len(request.uid) == 32
    w = request.to_proto()
    assert w.ref.mode == common_pb2.MODE_LOCAL and list(w.command) == ["/usr/bin/Python3.11", "x.py"]
    assert (w.request.memory_gib, w.request.compute_percent) == (8, 30)
    assert not w.environment  # the submission is on the bus: the environment goes via the workspace
    env = request.environment()
    assert env["MY_VAR"] == "1"
    assert "ALNAIR_NATS_TOKEN" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_ps_row_shows_assignment_or_request() -> None:
    event = wl.WorkloadEvent()
    w = event.workload
    w.ref.name, w.ref.uid, w.ref.mode = "job", "0123456789", common_pb2.MODE_LOCAL
    w.request.memory_gib, w.request.compute_percent = 8, 30
    w.phase = wl.WORKLOAD_PHASE_PENDING
    now = datetime.now(UTC)
    w.created_at.FromDatetime(now - timedelta(minutes=3))
    r = row(event, now)
    assert (r["state"], r["gpu"], r["memory_gib"], r["age"], r["uid"]) == \
        ("pending", "-", "8", "3m", "01234567")
    w.phase = wl.WORKLOAD_PHASE_RUNNING
    w.assignment.gpu_uuid, w.assignment.memory_gib, w.assignment.compute_percent = "GPU-1", 8, 30
    w.annotations["ai.centaurus.io/simulated-gpu"] = "true"
    assert row(event, now)["gpu"] == "0:GPU-1 (sim)"
