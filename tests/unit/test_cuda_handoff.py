"""The interceptor hand-off's writer side: the limits file's text, its atomic read-only
write, the environment, and the decisions it refuses to render."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from alnair_common import PermanentError
from alnair_common.cuda_handoff import CudaShare, interceptor_env, render_limits, write_limits


def test_limits_text_leaves_out_zero_amounts() -> None:
    both = render_limits(CudaShare("ml/a", "GPU-1", memory_gib=8, compute_percent=30)).splitlines()
    assert both[0].startswith("#") and both[1:] == [f"memory_bytes = {8 << 30}", "compute_percent = 30",
                                                      "workload_id = ml/a"]
    neither = render_limits(CudaShare("ml/a", "GPU-1")).splitlines()
    assert neither[1:] == ["workload_id = ml/a"]


def test_environment_names_card_workspace_and_only_the_limits_asked_for() -> None:
    env = interceptor_env(CudaShare("ml/a", "GPU-1", memory_gib=0, compute_percent=30),
                          workspace="/var/run/alnair", interceptor="/lib/libalnair_cuda.so")
    assert env == {"CUDA_VISIBLE_DEVICES": "GPU-1", "LD_PRELOAD": "/lib/libalnair_cuda.so",
                   "ALNAIR_WORKSPACE": "/var/run/alnair", "ALNAIR_WORKLOAD_ID": "ml/a",
                   "ALNAIR_VGPU_COMPUTE_PERCENT": "30"}
    assert "LD_PRELOAD" not in interceptor_env(CudaShare("ml/a", "GPU-1"), workspace="/w", interceptor=None)


def test_write_replaces_a_read_only_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    write_limits(tmp_path, CudaShare("ml/a", "GPU-1", memory_gib=1))
    path = write_limits(tmp_path, CudaShare("ml/a", "GPU-1", memory_gib=2))
    assert path == tmp_path / "limits" and f"memory_bytes = {2 << 30}" in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert [p.name for p in tmp_path.iterdir()] == ["limits"]


@pytest.mark.parametrize(("share", "message"), [
    (dict(workload_id="ml/a\nmemory_bytes = 1", gpu_uuid="GPU-1"), "holds a line break"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1 # x"), "GPU UUID"),
    (dict(workload_id="", gpu_uuid="GPU-1"), "workload id '' is empty"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", memory_gib=-1), "memory -1 GiB is negative"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", compute_percent=250), "compute 250 % is outside 0..100"),
])
def test_a_share_that_could_add_lines_or_is_impossible_is_refused(share: dict, message: str) -> None:
    with pytest.raises(PermanentError, match=message):
        CudaShare(**share)
