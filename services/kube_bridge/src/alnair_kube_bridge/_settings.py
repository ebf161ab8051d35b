"""Settings of kube-bridge (``ALNAIR_*`` environment variables)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from alnair_common import ServiceSettings


class KubeBridgeSettings(ServiceSettings):
    kubeconfig: Path | None = Field(
        None, description="kubeconfig to use; unset means in-cluster service-account credentials")
    watch_namespace: str = Field(
        "", description="Namespace to watch and act in; empty watches every namespace")
    scheduler_name: str = Field("alnair-scheduler", description="schedulerName of Alnair's pods")
    watch_timeout_seconds: int = Field(
        30, ge=1, le=3600,
        description="Server-side timeout of one watch request; the watch then resumes from its "
                    "resourceVersion (bounds how long a stop waits for a quiet watch)")
    api_timeout_seconds: float = Field(10.0, gt=0, le=300, description="Timeout of API calls")
    deleted_retention_seconds: float = Field(
        3600.0, ge=600, description="A deleted pod's lifecycle record is forgotten this long "
        "after its deletion (not at once: a resumed watch may replay its older events)")
    retention_check_seconds: float = Field(300.0, gt=0, le=86400)
    bind_concurrency: int = Field(
        32, ge=1, le=64,
        description="Bind decisions carried out at once (each one Binding call, whose latency "
                    "under load, not CPU, limits a burst); 1 binds strictly in decision order")
    pod_event_lanes: int = Field(
        32, ge=1, le=256,
        description="Pods whose watch events are turned into workload events at once (each "
                    "pod's in order); 1 handles every pod's events strictly in watch order")
    rendezvous_relay_seconds: float = Field(
        1.0, gt=0, le=60,
        description="How often the logs of training jobs' rendezvous pods are read for closed "
                    "rounds (one list and one log read per running gang each time), and their "
                    "workers' progress sidecars for the newest step (one list, at most two "
                    "log tails per job)")
