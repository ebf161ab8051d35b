"""A server binary run for the tests, in its own process group, logging to a file.

Why a process group: several servers fork helpers (Prometheus does not, but a shell
wrapper or a future binary might), and a test that fails half-way must not leave any of
them behind. Stopping signals the whole group: SIGTERM, then SIGKILL after a grace period.
Every started process is also remembered in a module-level registry that an ``atexit``
hook drains, so an interpreter that exits without running the fixtures' finalizers still
reaps its servers. Where no Python code runs at all — pytest killed by SIGTERM or SIGKILL
from a CI timeout — Linux's parent-death signal (``PR_SET_PDEATHSIG``) kills each server
with its parent. The kernel ties that signal to the *thread* that forked, so it is only
armed for servers started from the main thread, where pytest runs fixtures.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..processes import die_with_parent
from ._plane_errors import ServerStartError

_LOG_TAIL_LINES = 40
_running: set[ServerProcess] = set()


class ServerProcess:
    """One server process; ``stop()`` is idempotent and always reaps the whole group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [os.fspath(a) for a in argv]
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 — closed in stop()
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        except OSError as e:
            self._log.close()
            raise ServerStartError(f"{name}: cannot execute {self.argv[0]}: {e}") from e
        _running.add(self)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def exit_code(self) -> int | None:
        """The exit status if the process has ended, else None."""
        return self._popen.poll()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the server's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"(log {self.log_path} unreadable: {e})"
        return "\n".join(text.splitlines()[-lines:])

    def describe_failure(self, problem: str) -> str:
        """A message naming the server, its problem, its log file and the log's tail."""
        return (
            f"{self.name} (pid {self.pid}) {problem}; log {self.log_path}, last lines:\n"
            f"{self.log_tail()}"
        )

    def check_alive(self) -> None:
        """Raise ServerStartError if the server has already exited."""
        code = self.exit_code()
        if code is not None:
            raise ServerStartError(self.describe_failure(f"exited with status {code}"))

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Terminate the process group, escalating to SIGKILL after ``grace_seconds``."""
        _running.discard(self)
        try:
            if self._popen.poll() is None:
                _signal_group(self._popen.pid, signal.SIGTERM)
                try:
                    self._popen.wait(timeout=grace_seconds)
                except subprocess.TimeoutExpired:
                    pass
            # Children of the leader may outlive it; the group id stays the leader's pid.
            _signal_group(self._popen.pid, signal.SIGKILL)
            if self._popen.poll() is None:
                self._popen.wait(timeout=grace_seconds)
        finally:
            self._log.close()

    def __repr__(self) -> str:
        return f"ServerProcess({self.name!r}, pid={self.pid}, log={str(self.log_path)!r})"


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


@atexit.register
def _stop_leftovers() -> None:
    for process in list(_running):
        process.stop(grace_seconds=2.0)
