"""A training job's directory in local mode: what `alnair job submit` and the agent share.

``<data dir>/jobs/<namespace>.<name>/`` (the platform user's only, like a workspace) holds
``environment.json`` and ``working_dir`` (the submitting shell's, written by ``alnair job
submit``: the workers start there with that environment, as ``alnair run``'s command does;
never on the bus), ``applied`` (the newest WorkerPlan generation carried out) and one
``rendezvous/<id>/`` per gang (its host's ``endpoint``, ``rounds.jsonl``, ``pid`` and
``output.log``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._workspace import _write, make_private_directory, read_environment, write_environment


@dataclass(frozen=True)
class JobFiles:
    path: Path

    @classmethod
    def of(cls, jobs_dir: Path, namespace: str, name: str) -> JobFiles:
        return cls(jobs_dir / f"{namespace or 'default'}.{name}")

    def write_submission(self, environment: dict[str, str], working_dir: str) -> None:
        make_private_directory(self.path)
        write_environment(self.path / "environment.json", environment)
        _write(self.path / "working_dir", working_dir.encode(), mode=0o600)

    def environment(self) -> dict[str, str] | None:
        return read_environment(self.path / "environment.json")

    def working_dir(self) -> str:
        try:
            return (self.path / "working_dir").read_text()
        except OSError:
            return ""

    def applied(self) -> int:
        try:
            return int((self.path / "applied").read_text())
        except (OSError, ValueError):
            return 0

    def record_applied(self, generation: int) -> None:
        make_private_directory(self.path)
        _write(self.path / "applied", str(generation).encode())

    def rendezvous(self, rendezvous_id: str) -> Path:
        return self.path / "rendezvous" / rendezvous_id

    def rendezvous_ids(self) -> list[str]:
        try:
            return sorted(p.name for p in (self.path / "rendezvous").iterdir() if p.is_dir())
        except OSError:
            return []
