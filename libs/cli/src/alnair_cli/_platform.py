"""Where a running local platform can be found: ``<data dir>/run/platform.json``.

``alnair up`` writes it once NATS listens and removes it on exit; the other commands read it
to find the bus. A file left by a platform that died (its pid is gone) counts as absent.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


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
