"""Builds the GPU sample source the settings ask for (the one place that knows all three)."""

from __future__ import annotations

from alnair_common import ConfigError, get_logger
from alnair_gpu import GpuSampler, NvmlSampler, ReplaySampler, SampleSourceError, load_recording

from ._settings import ExporterSettings


def gpu_sampler(settings: ExporterSettings) -> GpuSampler | None:
    """The configured source; a source that cannot start is a ConfigError naming the fix."""
    if settings.gpu_source == "auto":
        try:
            return NvmlSampler()
        except SampleSourceError as e:
            get_logger("alnair.exporter").warning(
                "no GPU measurements: NVML unavailable; exporting CUDA regions and host usage only",
                reason=str(e))
            return None
    try:
        if settings.gpu_source == "nvml":
            return NvmlSampler()
        if settings.gpu_source == "replay":
            assert settings.replay_file is not None  # the settings validator guarantees it
            return ReplaySampler(load_recording(settings.replay_file), gpus=settings.replay_gpus,
                                 processes_per_gpu=settings.replay_processes_per_gpu)
    except SampleSourceError as e:
        raise ConfigError(f"ALNAIR_GPU_SOURCE={settings.gpu_source}: {e}") from e
    return None
