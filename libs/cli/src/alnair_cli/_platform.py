"""Where a running local platform can be found: ``<data dir>/run/platform.json``.

``alnair up`` writes it once NATS listens and removes it on exit; the other commands read it
to find the bus. A file left by a platform that died (its pid is gone) counts as absent.
The bus credentials live beside it, in ``<data dir>/credentials`` (one NKey seed per role,
readable by the platform's user only): the CLI connects as ``cli`` with ``cli.nk`` there.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from alnair_common import Bus
from alnair_common.credentials import BusCredentials


def bus_credentials(data_dir: Path) -> BusCredentials:
    return BusCredentials(data_dir / "credentials")


@dataclass(frozen=True)
class BusTarget:
    """The bus a CLI command talks to, and the identity it connects with."""

    url: str
    credentials: Path | None
    tls_ca: Path | None = None

    @classmethod
    def find(cls, data_dir: Path, url: str) -> BusTarget:
        """``ALNAIR_NATS_CREDENTIALS`` if set, else the platform's ``cli`` seed if it exists;
        ``ALNAIR_NATS_TLS_CA`` for a cluster's bus (``tls://``, see k8s/README.md)."""
        ca = os.environ.get("ALNAIR_NATS_TLS_CA")
        tls_ca = Path(ca) if ca else None
        given = os.environ.get("ALNAIR_NATS_CREDENTIALS")
        if given:
            return cls(url, Path(given), tls_ca)
        seed = bus_credentials(data_dir).seed_file("cli")
        return cls(url, seed if seed.exists() else None, tls_ca)

    async def connect(self) -> Bus:
        return await Bus.connect(self.url, service="cli", credentials=self.credentials,
                                 tls_ca=self.tls_ca, first_connect_attempts=2)


@dataclass(frozen=True)
class PlatformInfo:
    nats_url: str
    pid: int
    data_dir: str

    @staticmethod
    def path(data_dir: Path) -> Path:
        return data_dir / "run" / "platform.json"

    def write(self) -> None:
        path = self.path(Path(self.data_dir))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(path)

    @classmethod
    def read(cls, data_dir: Path) -> PlatformInfo | None:
        """The running platform's info, or None if none runs from ``data_dir``."""
        try:
            info = cls(**json.loads(cls.path(data_dir).read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return info if pid_alive(info.pid) else None

    def remove(self) -> None:
        self.path(Path(self.data_dir)).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
