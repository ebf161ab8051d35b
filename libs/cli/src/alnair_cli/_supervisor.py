"""Supervises the local platform's services as child processes.

Each child runs in its own process group so a signal reaches everything it started. A child
that exits is restarted after a backoff that doubles from 0.5 s to 30 s and resets once the
child has stayed up for 30 s. Output of every child goes, line by line, to one merged view
(prefixed with the service name) and to ``<data dir>/logs/<service>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from alnair.v1 import platform_pb2
from alnair_common.processes import die_with_parent

LineSink = Callable[[str, str], None]
# A crash-looping service is retried at most every 5 s and counts as healthy again after
# 10 s up: both well inside `alnair run`'s wait for the local agent (AGENT_TIMEOUT, 15 s),
# so a run submitted during a restart is answered, not given up on.
MIN_BACKOFF, MAX_BACKOFF, STABLE_AFTER = 0.5, 5.0, 10.0
# Each service's log is rotated at this size, keeping LOG_KEEP older files (.1 newest).
LOG_MAX_BYTES, LOG_KEEP = 10 * 1024 * 1024, 3


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    state: int = platform_pb2.PROCESS_STATE_STARTING
    pid: int = 0
    restarts: int = 0
    last_exit_code: int | None = None
    since: datetime = field(default_factory=lambda: datetime.now(UTC))
    process: asyncio.subprocess.Process | None = None

    def to_proto(self) -> platform_pb2.SupervisedService:
        msg = platform_pb2.SupervisedService(
            name=self.name, pid=self.pid, state=self.state, restarts=self.restarts
        )
        msg.since.FromDatetime(self.since)
        if self.last_exit_code is not None:
            msg.last_exit_code = self.last_exit_code
        return msg


class Supervisor:
    def __init__(self, children: list[Child], sink: LineSink, grace_seconds: float = 10.0) -> None:
        self.children = children
        self.sink = sink
        self.grace_seconds = grace_seconds
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        for child in self.children:
            self._tasks.append(asyncio.create_task(self._keep_running(child), name=child.name))

    async def stop(self) -> None:
        """SIGTERM every child's group, SIGKILL what is left after the grace period."""
        self._stopping.set()
        procs = [c.process for c in self.children if c.process and c.process.returncode is None]
        for proc in procs:
            _signal_group(proc.pid, signal.SIGTERM)
        if procs:
            _, pending = await asyncio.wait(
                [asyncio.create_task(p.wait()) for p in procs], timeout=self.grace_seconds
            )
            for proc in procs:
                if proc.returncode is None:
                    _signal_group(proc.pid, signal.SIGKILL)
            for task in pending:
                await task
        for proc in procs:  # the leaders are gone; make sure their groups are too
            _signal_group(proc.pid, signal.SIGKILL)
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _keep_running(self, child: Child) -> None:
        backoff = MIN_BACKOFF
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        while not self._stopping.is_set():
            started = time.monotonic()
            child.state = platform_pb2.PROCESS_STATE_STARTING
            child.process = await asyncio.create_subprocess_exec(
                *child.argv, env=child.env, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                # A supervisor killed with SIGKILL still takes its services down (gracefully:
                # the local agent leaves its workloads running for the next `alnair up`).
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
            child.pid = child.process.pid
            child.state = platform_pb2.PROCESS_STATE_RUNNING
            child.since = datetime.now(UTC)
            await self._pump(child, child.process)
            code = await child.process.wait()
            child.last_exit_code = code
            if self._stopping.is_set():
                break
            if time.monotonic() - started > STABLE_AFTER:
                backoff = MIN_BACKOFF
            child.state = platform_pb2.PROCESS_STATE_BACKOFF
            child.since = datetime.now(UTC)
            self.sink(child.name, f"exited with {code}; restarting in {backoff:.1f} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
            child.restarts += 1
        child.state = platform_pb2.PROCESS_STATE_STOPPED
        child.since = datetime.now(UTC)

    async def _pump(self, child: Child, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        log = open(child.log_path, "a", buffering=1)  # noqa: ASYNC230, SIM115 - once per start
        try:
            async for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                log.write(line + "\n")
                self.sink(child.name, line)
                if log.tell() > LOG_MAX_BYTES:
                    log.close()
                    rotate(child.log_path, LOG_KEEP)
                    log = open(child.log_path, "a", buffering=1)  # noqa: ASYNC230, SIM115
        finally:
            log.close()


def rotate(path: Path, keep: int) -> None:
    """``path`` becomes ``path.1``, ``path.1`` becomes ``path.2`` …; the oldest is dropped."""
    for i in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{i}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{i + 1}"))
    if path.exists():
        path.replace(path.with_name(f"{path.name}.1"))


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
