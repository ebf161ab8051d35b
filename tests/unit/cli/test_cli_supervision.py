"""The local supervisor's limits: back-off that `alnair run` outlasts, logs that stay bounded."""

from __future__ import annotations

from pathlib import Path

from alnair_cli._run import AGENT_TIMEOUT
from alnair_cli._supervisor import LOG_KEEP, MAX_BACKOFF, STABLE_AFTER, rotate


def test_a_restarting_agent_answers_within_alnair_runs_wait() -> None:
    # The longest pause between two starts of a crash-looping agent, plus the few seconds
    # it takes to connect and subscribe, must fit in the time `alnair run` waits for it.
    startup_allowance = 5.0
    assert MAX_BACKOFF + startup_allowance < AGENT_TIMEOUT
    assert STABLE_AFTER < AGENT_TIMEOUT


def test_rotation_keeps_the_newest_files_and_drops_the_oldest(tmp_path: Path) -> None:
    log = tmp_path / "scheduler.log"
    for generation in range(LOG_KEEP + 2):
        log.write_text(f"generation {generation}\n")
        rotate(log, LOG_KEEP)
    assert not log.exists()
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == [f"scheduler.log.{i}" for i in range(1, LOG_KEEP + 1)]
    newest = LOG_KEEP + 1
    for i in range(1, LOG_KEEP + 1):
        assert (tmp_path / f"scheduler.log.{i}").read_text() == f"generation {newest - i + 1}\n"
