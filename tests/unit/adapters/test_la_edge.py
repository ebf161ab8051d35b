"""The local agent's edge: submissions, the workload environment, the limits file."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import PermanentError
from alnair_common.cuda_handoff import CudaShare
from alnair_lifecycle import is_after, rank
from alnair_local_agent import Submission, Workspace, workload_env


def submitted(**changes) -> wl.Workload:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid="abc123", name="train",
                                               mode=common_pb2.MODE_LOCAL),
                    request=common_pb2.GpuRequest(memory_gib=8, compute_percent=30),
                    command=["python", "train.py"])
    for key, value in changes.items():
        if key == "compute":
            w.request.compute_percent = value
        elif key == "command":
            del w.command[:]
            w.command.extend(value)
        elif key == "name":
            w.ref.name = value
    return w


def test_valid_submission_becomes_a_domain_object() -> None:
    sub = Submission.from_proto(submitted())
    assert (sub.uid, sub.name, sub.command, sub.memory_gib, sub.compute_percent) == \
        ("abc123", "train", ("python", "train.py"), 8, 30)


@pytest.mark.parametrize(("changes", "message"), [
    ({"compute": 250}, "compute 250 % is outside 1..100"),
    ({"command": []}, "command is empty"),
    ({"name": "Has Space"}, "name 'Has Space' must be lower-case"),
])
def test_bad_submissions_say_what_is_wrong(changes: dict, message: str) -> None:
    with pytest.raises(PermanentError, match=message):
        Submission.from_proto(submitted(**changes))


def test_environment_is_the_device_plugins_and_not_the_users(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    env = workload_env({"PATH": "/bin", "LD_PRELOAD": "evil.so", "CUDA_VISIBLE_DEVICES": "0,1",
                        "ALNAIR_VGPU_MEMORY_BYTES": "999999999999"},
                       CudaShare(workload_id="u1", gpu_uuid="GPU-x", memory_gib=8, compute_percent=30),
                       workspace=workspace, interceptor=Path("/opt/libalnair_cuda.so"))
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "GPU-x",
                   "LD_PRELOAD": "/opt/libalnair_cuda.so",
                   "ALNAIR_VGPU_MEMORY_BYTES": str(8 << 30), "ALNAIR_VGPU_COMPUTE_PERCENT": "30",
                   "ALNAIR_WORKSPACE": str(tmp_path), "ALNAIR_WORKLOAD_ID": "u1"}
    # The data client's variables pass (alnair run --dataset); no other ALNAIR_* setting does.
    reader = {"ALNAIR_DATASET": "mnist", "ALNAIR_DATASET_SOURCE": "file:///d", "ALNAIR_DATASETS": "a,b",
              "ALNAIR_DATASET_A_SOURCE": "s3://a", "ALNAIR_CACHE_TIER_URL": "dir:///c",
              "ALNAIR_CACHE_PREFIX": "alnair"}
    env = workload_env({**reader, "ALNAIR_VGPU_COMPUTE_PERCENT": "100", "ALNAIR_MPS_PIPE_DIRECTORY": "/x",
                        "ALNAIR_LIMITS_FILE": "/tmp/mine"},
                       CudaShare(workload_id="u1", gpu_uuid="GPU-x", memory_gib=8, compute_percent=30),
                       workspace=workspace, interceptor=None)
    assert {k: env[k] for k in reader} == reader
    assert env["ALNAIR_VGPU_COMPUTE_PERCENT"] == "30"
    assert "ALNAIR_MPS_PIPE_DIRECTORY" not in env and "ALNAIR_LIMITS_FILE" not in env
    without = workload_env({}, CudaShare(workload_id="u1", gpu_uuid="GPU-x", memory_gib=1, compute_percent=5),
                           workspace=workspace, interceptor=None)
    assert "LD_PRELOAD" not in without


def test_limits_file_uses_the_interceptors_format(tmp_path: Path) -> None:
    Workspace(tmp_path).write_limits(CudaShare(workload_id="u1", gpu_uuid="GPU-x", memory_gib=8,
                                               compute_percent=30))
    lines = [line for line in (tmp_path / "limits").read_text().splitlines()
             if not line.startswith("#")]
    assert lines == [f"memory_bytes = {8 << 30}", "compute_percent = 30", "workload_id = u1"]


def test_a_zero_memory_limit_is_no_limit_not_a_refusal(tmp_path: Path) -> None:
    # The interceptor reads "memory_bytes = 0" as "refuse every allocation": a workload that
    # asked for no memory limit must get no key and no variable (as a pod does).
    share = CudaShare(workload_id="u1", gpu_uuid="GPU-x", memory_gib=0, compute_percent=30)
    Workspace(tmp_path).write_limits(share)
    assert "memory_bytes" not in (tmp_path / "limits").read_text()
    env = workload_env({"ALNAIR_VGPU_MEMORY_BYTES": "0"}, share, workspace=Workspace(tmp_path), interceptor=None)
    assert "ALNAIR_VGPU_MEMORY_BYTES" not in env and env["ALNAIR_VGPU_COMPUTE_PERCENT"] == "30"


def test_lifecycle_only_moves_forward() -> None:
    order = [wl.WORKLOAD_PHASE_PENDING, wl.WORKLOAD_PHASE_BOUND, wl.WORKLOAD_PHASE_RUNNING,
             wl.WORKLOAD_PHASE_SUCCEEDED, wl.WORKLOAD_PHASE_DELETED]
    assert [rank(p) for p in order] == [1, 2, 3, 4, 5]
    assert is_after(wl.WORKLOAD_PHASE_RUNNING, wl.WORKLOAD_PHASE_PENDING)
    assert not is_after(wl.WORKLOAD_PHASE_FAILED, wl.WORKLOAD_PHASE_SUCCEEDED)
    assert not is_after(wl.WORKLOAD_PHASE_BOUND, wl.WORKLOAD_PHASE_RUNNING)
