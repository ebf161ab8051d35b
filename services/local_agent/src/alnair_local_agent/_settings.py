"""Settings of the local agent (``ALNAIR_*`` environment variables)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from alnair_common import ServiceSettings


class LocalAgentSettings(ServiceSettings):
    gpus: str = Field(
        "", description="GPU source: empty for the machine's GPUs (NVML), or a simulated "
                        "inventory such as 'sim:2x80' (`alnair up --gpus sim:2x80`)")
    interceptor_lib: Path | None = Field(
        None, description="Path of libalnair_cuda.so (make -C native/cuda_intercept); loaded "
                          "with LD_PRELOAD into every workload. Required with real GPUs.")

    workload_retention_seconds: float = Field(
        7 * 24 * 3600.0, gt=0, description="How long a finished local workload's record and "
                                           "workspace are kept after it ended")
    keep_finished: int = Field(
        500, ge=1, description="At most this many finished local workloads are kept (newest)")
    retention_check_seconds: float = Field(60.0, gt=0, le=86400,
                                           description="How often retention is applied")

    mps: bool = Field(False, description="MPS mode: one CUDA MPS control daemon per GPU, each "
                                         "workload's compute share an SM partition (`alnair up --mps`)")
    mps_control: str = Field("nvidia-cuda-mps-control",
                             description="The MPS control program (the NVIDIA driver's)")
    mps_check_seconds: float = Field(5.0, gt=0, le=600,
                                     description="How often each MPS control daemon is asked for its servers")
    worker_stop_grace_seconds: float = Field(
        10.0, gt=0, le=600, description="A training job's worker asked to stop gets SIGTERM, "
                                        "then SIGKILL after this long")

    @property
    def workloads_dir(self) -> Path:
        return self.data_dir / "workloads"

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "jobs"

    @property
    def mps_dir(self) -> Path:
        return self.data_dir / "mps"
