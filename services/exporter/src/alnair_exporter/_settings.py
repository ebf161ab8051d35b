"""Settings of the exporter (``ALNAIR_*`` environment variables, validated at start-up)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from alnair_common import ServiceSettings


class ExporterSettings(ServiceSettings):
    """Where to measure and how often.

    ``gpu_source``: ``nvml`` on a GPU node (fails to start without a driver — what the
    DaemonSet wants); ``auto`` (the default, for ``alnair up``) uses NVML where it works and
    otherwise measures CUDA regions and hosts only, saying so once; ``replay`` plays an NVML
    recording (CI, demos; every sample is marked simulated); ``none`` never touches NVML.
    """

    gpu_source: Literal["auto", "nvml", "replay", "none"] = "auto"
    replay_file: Path | None = Field(None, description="NVML recording (.jsonl.gz) for gpu_source=replay")
    replay_gpus: int | None = Field(None, ge=1, le=64, description="widen the replay to this many GPUs")
    replay_processes_per_gpu: int | None = Field(None, ge=0, le=1024)
    metrics_port: int = Field(9876, ge=0, le=65535, description="Prometheus /metrics port; 0 picks a free one")
    metrics_host: str = Field("127.0.0.1", description="address of /metrics; 0.0.0.0 in the DaemonSet")
    sample_period_seconds: float = Field(1.0, ge=0.05, le=60.0)
    host_period_seconds: float = Field(5.0, ge=0.0, le=300.0,
                                       description="how often per-pod cgroup and /proc usage is re-read")
    grace_seconds: float = Field(60.0, ge=0.0, le=86400.0,
                                 description="how long series of a finished workload stay")
    workspaces_dir: Path | None = Field(
        None, description="workload workspaces, one directory per workload uid; default <data_dir>/workloads, "
        "where the local agent keeps them (the DaemonSet sets the device plugin's host directory)")
    pod_resources_socket: Path | None = Field(
        None, description="the kubelet's PodResources socket (/var/lib/kubelet/pod-resources/kubelet.sock "
        "in the DaemonSet); unset: no allocation metrics")
    proc_root: Path = Path("/proc")
    cgroup_root: Path = Path("/sys/fs/cgroup")

    @model_validator(mode="after")
    def _replay_needs_file(self) -> ExporterSettings:
        if self.gpu_source == "replay" and self.replay_file is None:
            raise ValueError("gpu_source=replay needs ALNAIR_REPLAY_FILE (an NVML recording, .jsonl.gz)")
        return self

    @property
    def workspaces(self) -> Path:
        return self.workspaces_dir or self.data_dir / "workloads"
