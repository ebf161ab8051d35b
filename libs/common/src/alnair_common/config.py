"""Service settings from the environment (``ALNAIR_*``) and an optional TOML file.

Settings are validated once, at start-up: a bad value stops the service with a message that
names the setting, the value and what would be accepted, instead of failing later in the
middle of work. Precedence: environment > file (``ALNAIR_CONFIG``) > defaults.
"""

from __future__ import annotations

import os
import socket
import tomllib
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError

T = TypeVar("T", bound="ServiceSettings")


def default_data_dir() -> Path:
    return Path(os.environ.get("ALNAIR_HOME", Path.home() / ".alnair"))


class ServiceSettings(BaseSettings):
    """What every service needs; services subclass it to add their own settings."""

    model_config = SettingsConfigDict(env_prefix="ALNAIR_", extra="forbid", frozen=True)

    nats_url: str = Field("nats://127.0.0.1:4222", description="NATS server(s), comma-separated")
    nats_credentials: Path | None = Field(
        None, description="NKey seed file of this service's bus identity (its role's own)")
    nats_tls_ca: Path | None = Field(None, description="CA bundle that signed the NATS server's "
                                                        "certificate (for tls:// URLs)")
    node_name: str = Field(default_factory=socket.gethostname, description="This node's name")
    health_port: int = Field(0, ge=0, le=65535, description="HTTP health port; 0 picks a free one")
    health_host: str = Field("127.0.0.1", description="Address of the health endpoint")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    data_dir: Path = Field(default_factory=default_data_dir)
    shutdown_grace_seconds: float = Field(
        10.0, gt=0, le=600, description="Longest a stop may take: past it the process exits "
                                        "at once (exit 1), whatever it is waiting on")
    leader_lease_seconds: float = Field(
        10.0, ge=1, le=300, description="Lease of a leader-elected service: a standby takes "
                                        "over this long after the leader's last renewal")

    @field_validator("nats_url")
    @classmethod
    def _nats_scheme(cls, value: str) -> str:
        for url in value.split(","):
            if not url.strip().startswith(("nats://", "tls://", "ws://", "wss://")):
                raise ValueError(f"{url!r} must start with nats://, tls://, ws:// or wss://")
        return value

    @property
    def nats_servers(self) -> list[str]:
        return [u.strip() for u in self.nats_url.split(",")]


def load_settings(cls: type[T], **overrides: Any) -> T:
    """Build ``cls`` from environment, the ``ALNAIR_CONFIG`` TOML file and ``overrides``.

    Raises :class:`ConfigError` naming each bad setting as its environment variable.
    """
    file_values: dict[str, Any] = {}
    path = os.environ.get("ALNAIR_CONFIG")
    if path:
        try:
            file_values = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"ALNAIR_CONFIG={path}: cannot read it as TOML: {e}") from e
        env_keys = {k[len("ALNAIR_"):].lower() for k in os.environ if k.startswith("ALNAIR_")}
        file_values = {k: v for k, v in file_values.items() if k not in env_keys}
    try:
        return cls(**{**file_values, **overrides})
    except ValidationError as e:
        problems = []
        for err in e.errors():
            name = "_".join(str(p) for p in err["loc"]) or "?"
            given = err.get("input")
            problems.append(f"ALNAIR_{name.upper()}={given!r}: {err['msg']}")
        raise ConfigError(f"invalid {cls.__name__}: " + "; ".join(problems)) from e
