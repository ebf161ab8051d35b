"""Replay, then live: knowing when a consumer has handled the backlog it started with.

A service that rebuilds its model from a stream (or a KV bucket) after a restart must not act
on a half-read history: the scheduler would place on cards whose shares it has not read yet,
the device plugin would answer the kubelet without the decisions made while it was down. So
each replaying consumer has a *catch-up target* — the stream sequence of the last message
matching its subject when it started — and says when everything up to it has been handled.
Messages published after the start do not move the target, so a busy stream cannot keep a
consumer "replaying" forever.
"""

from __future__ import annotations

import asyncio

from ..errors import TemporaryError
from ._client import Bus


class NotCaughtUpError(TemporaryError):
    """A consumer has not handled its start-up backlog within the time asked for."""


async def last_sequence(bus: Bus, stream: str, subject: str) -> int:
    """Stream sequence of the last message of ``stream`` matching ``subject`` (wildcards
    allowed); 0 when there is none, so there is nothing to catch up with."""
    raw = await bus.last_stored(stream, subject)
    return 0 if raw is None else raw.seq or 0


class CatchUp:
    """The catch-up state of one consumer: its target, its progress, an event for waiters.

    The consumer decides when the target is reached (it knows whether its stream arrives in
    order); this only keeps the numbers a :class:`NotCaughtUpError` reports."""

    def __init__(self, what: str, *, until: str | None = None) -> None:
        self.what = what
        self.until = until  # how the end of the backlog is known, when not by a sequence
        self.target: int | None = None  # None until read from the server
        self.handled = 0  # messages settled (handled, dropped or terminated) by this process
        self.highest = 0  # highest stream sequence settled so far
        self.done = asyncio.Event()

    def settled(self, sequence: int) -> None:
        self.handled += 1
        self.highest = max(self.highest, sequence)

    def reached(self) -> None:
        self.done.set()

    async def wait(self, timeout: float) -> None:
        """Return once caught up; raise :class:`NotCaughtUpError` after ``timeout`` seconds."""
        if self.done.is_set():
            return
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except TimeoutError as e:
            if self.until is not None:
                backlog = self.until
            elif self.target is None:
                backlog = "the end of its backlog is not read from the server yet"
            else:
                backlog = f"the backlog it started with ends at stream sequence {self.target}"
            raise NotCaughtUpError(
                f"{self.what} has not caught up after {timeout:.1f} s: {self.handled} messages "
                f"handled, up to stream sequence {self.highest}; {backlog}") from e
