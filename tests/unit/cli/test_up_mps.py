"""`alnair up --mps`: MPS mode reaches the local agent only with the interceptor, which sets
each workload's MPS limits; without it the command refuses with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair_cli._up import agent_env
from alnair_common import ConfigError


def test_mps_without_the_interceptor_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"--mps needs the interceptor.*make -C native/cuda_intercept lib"):
        agent_env("sim:1x80", None, mps=True)


def test_mps_with_the_interceptor_turns_the_agent_s_mps_mode_on(tmp_path: Path) -> None:
    lib = tmp_path / "libalnair_cuda.so"
    lib.write_bytes(b"")
    env = agent_env("sim:1x80", lib, mps=True)
    assert env["ALNAIR_MPS"] == "true" and env["ALNAIR_INTERCEPTOR_LIB"] == str(lib.resolve())
    assert "ALNAIR_MPS" not in agent_env("sim:1x80", lib)
