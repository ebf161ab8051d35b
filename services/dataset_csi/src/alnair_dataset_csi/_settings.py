"""The plugin's settings (``ALNAIR_*`` environment variables): the services' common ones (its
health endpoint, logs, node name; it uses no bus) and its own."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator

from alnair_common import ServiceSettings
from alnair_common.tier_readers import ReaderKey


class DatasetCsiSettings(ServiceSettings):
    csi_endpoint: str = Field("unix:///csi/csi.sock",
                              description="Where the kubelet calls the plugin (a unix socket)")
    pod_tier_url: str = Field(
        "", description="The cache tier as this node reaches it, without a credential: each "
                        "mount reads as its pod's namespace's read-only tier user")
    cache_reader_key: ReaderKey = Field(SecretStr(""), description="The hydrator's and the "
                                        "webhook's ALNAIR_CACHE_READER_KEY")
    pod_cache_prefix: str = Field("alnair", min_length=1)
    state_dir: Path = Field(Path("/var/lib/alnair/dataset-csi"),
                            description="The mounts' logs, one per volume")
    mount_timeout_seconds: float = Field(60.0, gt=0, le=600)

    @field_validator("csi_endpoint")
    @classmethod
    def _unix(cls, value: str) -> str:
        if not value.startswith("unix:///"):
            raise ValueError(f"{value!r}: the kubelet calls node plugins on a unix socket "
                             "(unix:///absolute/path)")
        return value

    @property
    def socket_path(self) -> str:
        return self.csi_endpoint.removeprefix("unix://")
