"""Exporter settings and sources fail at start-up with the setting and the fix in the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair_common import ConfigError, load_settings
from alnair_exporter import ExporterSettings
from alnair_exporter._sources import gpu_sampler


def test_replay_without_a_file_is_refused() -> None:
    with pytest.raises(ConfigError, match="ALNAIR_REPLAY_FILE"):
        load_settings(ExporterSettings, gpu_source="replay")


def test_a_bad_period_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="ALNAIR_SAMPLE_PERIOD_SECONDS"):
        load_settings(ExporterSettings, sample_period_seconds=0)


def test_an_unreadable_recording_is_a_config_error(tmp_path: Path) -> None:
    settings = load_settings(ExporterSettings, gpu_source="replay", replay_file=tmp_path / "nope.jsonl.gz")
    with pytest.raises(ConfigError, match="ALNAIR_GPU_SOURCE=replay: cannot read NVML recording"):
        gpu_sampler(settings)


def _driver_present() -> bool:
    import pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_nvml_source_works_or_points_at_the_replay_source() -> None:
    settings = load_settings(ExporterSettings, gpu_source="nvml")
    if _driver_present():  # a GPU machine: the real source starts and measures every GPU
        sampler = gpu_sampler(settings)
        assert sampler is not None and not sampler.sample().simulated
        sampler.close()
        return
    # CI and the dev machines have no NVIDIA driver: the real NVML source must say so clearly
    with pytest.raises(ConfigError, match="ALNAIR_GPU_SOURCE=replay"):
        gpu_sampler(settings)


def test_replay_source_widens_the_recording() -> None:
    recording = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200" / "idle_notebook.jsonl.gz"
    sampler = gpu_sampler(load_settings(ExporterSettings, gpu_source="replay", replay_file=recording,
                                        replay_gpus=4))
    assert sampler is not None
    snap = sampler.sample()
    assert snap.simulated and len(snap.devices) == 4


def test_no_gpu_source_means_regions_and_hosts_only() -> None:
    assert gpu_sampler(load_settings(ExporterSettings, gpu_source="none")) is None
    # `alnair up` on a machine without a GPU: the default degrades instead of refusing to start
    auto = gpu_sampler(load_settings(ExporterSettings))
    assert (auto is not None) == _driver_present()
    if auto is not None:
        auto.close()
    # local mode: the local agent's workload directories (alnair_local_agent: <data dir>/workloads/<uid>)
    assert load_settings(ExporterSettings, data_dir=Path("/x")).workspaces == Path("/x/workloads")
