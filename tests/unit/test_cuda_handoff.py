"""The interceptor hand-off's writer side: the limits file's text, its atomic read-only
write, the environment, a container's workspace (modes, the empty region, ld.so.preload),
and the decisions it refuses to render."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from alnair_common import PermanentError
from alnair_common.cuda_handoff import (
    CudaShare,
    create_region,
    interceptor_env,
    prepare_container_workspace,
    render_ld_so_preload,
    render_limits,
    write_limits,
)


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
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", mps_pipe_directory="run/mps"), "MPS pipe directory 'run/mps'"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", mps_pipe_directory="/mps\nmemory_bytes = 1"),
     "MPS pipe directory"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", mps_pipe_directory="/mps#x"), "MPS pipe directory"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", mps_pipe_directory="/mps\0"), "MPS pipe directory"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", mps_pipe_directory="/mps "), "surrounding blanks"),
    (dict(workload_id="ml/a", gpu_uuid="GPU-1", mps_pipe_directory="/" + "a" * 1023), "at most 1023 bytes"),
])
def test_a_share_that_could_add_lines_or_is_impossible_is_refused(share: dict, message: str) -> None:
    with pytest.raises(PermanentError, match=message):
        CudaShare(**share)


def test_mps_mode_names_the_pipe_directory_in_the_file_and_nowhere_else() -> None:
    share = CudaShare("ml/a", "GPU-1", memory_gib=8, compute_percent=30,
                      mps_pipe_directory="/run/alnair/mps/GPU-1/pipe")
    lines = render_limits(share, workspace="/var/run/alnair").splitlines()
    assert lines[1:] == [f"memory_bytes = {8 << 30}", "compute_percent = 30", "workload_id = ml/a",
                         "mps_pipe_directory = /run/alnair/mps/GPU-1/pipe", "workspace = /var/run/alnair"]
    assert "mps_pipe_directory" not in render_limits(CudaShare("ml/a", "GPU-1", compute_percent=30))
    # The interceptor sets the MPS variables itself: the launcher hands over none.
    env = interceptor_env(share, workspace="/var/run/alnair", interceptor="/lib/libalnair_cuda.so")
    assert not [k for k in env if k.startswith("CUDA_MPS_")]


def test_only_the_container_file_names_its_workspace() -> None:
    share = CudaShare("ml/a", "GPU-1", memory_gib=8)
    assert "workspace" not in render_limits(share)
    assert render_limits(share, workspace="/var/run/alnair").splitlines()[-1] == "workspace = /var/run/alnair"
    for bad in ("relative/dir", "/a\nmemory_bytes = 1", "/a#b"):
        with pytest.raises(PermanentError, match="absolute path"):
            render_limits(share, workspace=bad)


def test_container_workspace_layout_and_modes(tmp_path: Path) -> None:
    ws = tmp_path / "u-1"
    share = CudaShare("ml/a", "GPU-1", memory_gib=4, compute_percent=30)
    prepare_container_workspace(ws, share, container_workspace="/var/run/alnair",
                                interceptor="/usr/local/alnair/lib/libalnair_cuda.so")
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in ws.iterdir()}
    assert modes == {"limits": 0o444, "cuda.region": 0o666, "ld.so.preload": 0o444}
    assert stat.S_IMODE(ws.stat().st_mode) == 0o755  # root's: the tenant adds or removes nothing
    assert (ws / "ld.so.preload").read_text() == "/usr/local/alnair/lib/libalnair_cuda.so\n"
    assert (ws / "cuda.region").stat().st_size == 0  # the interceptor lays it out
    assert "workspace = /var/run/alnair" in (ws / "limits").read_text()

    # Idempotent, and a region already in use is kept.
    (ws / "cuda.region").write_bytes(b"in use")
    prepare_container_workspace(ws, share, container_workspace="/var/run/alnair",
                                interceptor="/usr/local/alnair/lib/libalnair_cuda.so")
    assert (ws / "cuda.region").read_bytes() == b"in use"
    assert create_region(ws) == ws / "cuda.region" and (ws / "cuda.region").read_bytes() == b"in use"


@pytest.mark.parametrize("path", ["lib.so", "/a b/lib.so", "/a:/b.so", "/a\n/b.so"])
def test_a_preload_path_the_loader_would_split_is_refused(path: str) -> None:
    with pytest.raises(PermanentError, match="dynamic loader splits"):
        render_ld_so_preload(path)
