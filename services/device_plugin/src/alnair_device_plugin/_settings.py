"""The device plugin's settings (``ALNAIR_*`` environment) and its GPU source choice."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from alnair_common import ServiceSettings
from alnair_gpu import InventorySource, NvmlInventory, RecordedInventory, SimulatedInventory


class DevicePluginSettings(ServiceSettings):
    device_plugin_dir: Path = Field(Path("/var/lib/kubelet/device-plugins"),
                                    description="The kubelet's device-plugins directory (kubelet.sock lives there)")
    gpus: str = Field("nvml", description="GPU source: 'nvml', 'recorded:<inventory.json>' or 'sim:<N>x<GiB>'")
    # Inside the workspaces hostPath (k8s/base/services/device-plugin.yaml mounts only that
    # read-write); a dot-directory, so it is never taken for a workspace.
    state_dir: Path = Field(Path("/var/lib/alnair/workspaces/.device-plugin"),
                            description="The plugin's assignment index (must survive plugin restarts)")
    workspace_root: Path = Field(Path("/var/lib/alnair/workspaces"),
                                 description="Host directory of per-workload workspaces (same path in the plugin)")
    interceptor_host_path: Path = Field(Path("/opt/alnair/lib/libalnair_cuda.so"),
                                        description="The interceptor on the host (copied there by the init container)")
    interceptor_container_path: str = "/usr/local/alnair/lib/libalnair_cuda.so"
    workspace_container_path: str = "/var/run/alnair"
    kubelet_poll_seconds: float = Field(0.25, gt=0, le=2.0)
    assignment_wait_seconds: float = Field(2.0, ge=0, le=30, description="How long Allocate waits for a "
                                           "bind decision still in flight before refusing")
    pod_resources_socket: Path = Field(Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
                                       description="The kubelet's PodResources API, to check allocations")
    reconcile_seconds: float = Field(10.0, ge=0, le=3600, description="PodResources check period; 0 turns it off")
    stale_grace_seconds: float = Field(60.0, ge=0, description="How long the kubelet must not list an allocation "
                                       "before its workspace is removed")

    # MPS mode (issue #19 section 2; README, "MPS mode"). The host directory is mounted at the
    # same path in the plugin and, each card's pipe directory, read-only in its containers;
    # not under workspace_container_path, which containers see read-only.
    mps: bool = Field(False, description="MPS mode: one CUDA MPS control daemon per GPU, each "
                                         "container's compute share an SM partition")
    mps_dir: Path = Field(Path("/var/run/alnair-mps"),
                          description="Host directory of each card's MPS pipe and log directories")
    mps_control: str = Field("nvidia-cuda-mps-control", description="The MPS control program (the NVIDIA driver's)")
    mps_check_seconds: float = Field(5.0, gt=0, le=600,
                                     description="How often each MPS control daemon is asked for its servers")
    mps_answer_seconds: float = Field(10.0, gt=0, le=120,
                                      description="How long a started MPS control daemon has to answer")

    @field_validator("gpus")
    @classmethod
    def _gpu_source(cls, value: str) -> str:
        if value == "nvml" or value.startswith(("recorded:", "sim:")):
            return value
        raise ValueError("expected 'nvml', 'recorded:<path to inventory.json>' or 'sim:<N>x<GiB>' (e.g. sim:2x80)")


def open_source(spec: str) -> InventorySource:
    """The GPU source a ``gpus`` setting names; errors name the problem (GpuError)."""
    if spec == "nvml":
        return NvmlInventory()
    if spec.startswith("recorded:"):
        return RecordedInventory.load(spec.removeprefix("recorded:"))
    return SimulatedInventory.parse(spec)
