"""Waiting for a condition with a deadline, never with a fixed sleep.

Unlike the public :func:`alnair_common.testing.wait_until`, this one knows which server
it waits on: servers take a variable time to start (a cold page cache, a loaded CI machine), so the
harness polls with a short, growing interval until a condition holds or a deadline passes.
When a watched server exits while waiting, the wait ends at once with that server's log
instead of running out the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ._plane_errors import ServerStartError, WaitTimeoutError
from ._server_process import ServerProcess

T = TypeVar("T")


def poll_until(
    check: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    process: ServerProcess | None = None,
    retry_on: tuple[type[BaseException], ...] = (OSError,),
) -> T:
    """Call ``check`` until it returns a truthy value and return that value.

    Exceptions of the ``retry_on`` types count as "not yet" (a connection refused while a
    server starts); the last one is quoted if the deadline passes.
    """
    started = time.monotonic()
    deadline = started + timeout
    interval = 0.02
    last_error: BaseException | None = None
    while True:
        if process is not None:
            process.check_alive()
        try:
            result = check()
        except retry_on as e:
            last_error = e
        else:
            if result:
                return result
        now = time.monotonic()
        if now >= deadline:
            problem = f"{what}: not true after {now - started:.1f} s (deadline {timeout:.0f} s)"
            if last_error is not None:
                problem += f"; last error: {type(last_error).__name__}: {last_error}"
            if process is not None:
                raise ServerStartError(process.describe_failure(problem))
            raise WaitTimeoutError(problem)
        time.sleep(min(interval, max(deadline - now, 0.0)))
        interval = min(interval * 1.5, 0.5)
