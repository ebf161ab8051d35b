"""Bus credentials: one NKey per role, and the nats-server configuration that trusts them.

NKeys rather than decentralised JWT accounts: the server's configuration lists each role's
public key with its permissions (generated from the subject table), and each process holds
only its own seed. That serves both modes with no account server or resolver — locally
``alnair up`` writes the seeds into the data directory (``credentials/<role>.nk``, mode
0600 in a 0700 directory, found there by the CLI the way a kubeconfig is), in Kubernetes
``scripts/bus-credentials`` writes them as one Secret per service and the server's users as
a Secret of their own. JWT accounts would add what Alnair does not need (several accounts,
users added without a reload) at the cost of an account resolver to run and keep in sync.

The seed never leaves its file: clients hand nats-py the path, and no seed is put in an
environment variable (a workload's environment must not be able to carry one).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

from .bus_permissions import authorization
from .errors import ConfigError
from .subjects import ROLES


def new_seed() -> bytes:
    """A fresh NKey user seed (``SU…``)."""
    return bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER))


def public_key(seed: bytes) -> str:
    """The public key (``U…``) of a user seed; ConfigError if it is not one."""
    try:
        return nkeys.from_seed(bytearray(seed.strip())).public_key.decode()
    except (nkeys.NkeysError, ValueError, TypeError) as e:
        raise ConfigError(f"not an NKey user seed: {e}") from e


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only, never briefly wider."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class BusCredentials:
    """The seeds of every role, in one private directory."""

    directory: Path

    def seed_file(self, role: str) -> Path:
        if role not in ROLES:
            raise ConfigError(f"unknown bus role {role!r}; the roles are {', '.join(ROLES)}")
        return self.directory / f"{role}.nk"

    @classmethod
    def ensure(cls, directory: Path) -> BusCredentials:
        """Create the directory and any missing seed; keep the ones already there."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(directory, 0o700)
        creds = cls(directory)
        for role in ROLES:
            path = creds.seed_file(role)
            if not path.exists():
                write_private(path, new_seed() + b"\n")
        return creds

    def public_keys(self) -> dict[str, str]:
        keys = {}
        for role in ROLES:
            path = self.seed_file(role)
            try:
                keys[role] = public_key(path.read_bytes())
            except OSError as e:
                raise ConfigError(f"cannot read the {role} bus credentials {path}: {e}") from e
            except ConfigError as e:
                raise ConfigError(f"{path}: {e}; delete it to have a new one made") from e
        return keys

    def server_config(self) -> dict[str, Any]:
        """The ``authorization`` part of nats-server's configuration for these seeds."""
        return {"authorization": authorization(self.public_keys())}


def render_server_config(config: dict[str, Any]) -> str:
    """nats-server reads JSON as its configuration syntax."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
