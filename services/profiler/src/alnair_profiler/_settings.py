"""The profiler's settings (``ALNAIR_*`` environment variables or the TOML file)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from alnair_common import ServiceSettings


class ProfilerSettings(ServiceSettings):
    mongo_url: str | None = Field(
        None, description="MongoDB URL; unset: the embedded store under <data_dir>/profiler/store")
    mongo_database: str = Field("alnair", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    mongo_collection: str = Field("workload_profiles", pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    store_timeout_seconds: float = Field(2.0, gt=0, le=60)
    prometheus_url: str | None = Field(None, description="Prometheus for cAdvisor maxima (Kubernetes mode)")
    prometheus_rate_window_seconds: float = Field(30.0, ge=1, le=3600)
    prometheus_resolution_seconds: float = Field(5.0, ge=1, le=3600)
    prometheus_timeout_seconds: float = Field(
        0.8, gt=0, le=60, description="Budget for all PromQL queries of one profile (the record is due in 1 s)")
    checkpoint_interval_seconds: float = Field(5.0, gt=0, le=3600)
    retry_interval_seconds: float = Field(1.0, gt=0, le=600)
    unknown_sample_ttl_seconds: float = Field(600.0, gt=0)

    @field_validator("mongo_url")
    @classmethod
    def _mongo_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("mongodb://", "mongodb+srv://")):
            raise ValueError(f"{value!r} must start with mongodb:// or mongodb+srv://")
        return value or None

    @field_validator("prometheus_url")
    @classmethod
    def _prom_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value or None

    @property
    def embedded_dir(self) -> Path:
        return self.data_dir / "profiler" / "store"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "profiler" / "spool"
