"""Waiting without sleeps: poll a condition until a deadline, then fail with what was seen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(probe: Callable[[], Awaitable[T]], *, timeout: float = 10.0,
                   interval: float = 0.02, what: str = "condition") -> T:
    """Await ``probe()`` until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise TimeoutError(f"{what} not met within {timeout:.1f} s (last: {last!r})")


def wait_until(probe: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.05,
               what: str = "condition") -> T:
    """Synchronous twin of :func:`wait_for` for tests driving subprocesses."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"{what} not met within {timeout:.1f} s (last: {last!r})")
