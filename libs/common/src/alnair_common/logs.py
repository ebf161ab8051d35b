"""structlog set-up shared by every service: JSON when not on a terminal, readable on one.

Context (service, node, workload) is bound with ``structlog.contextvars`` so it follows
each asyncio task without being passed around. A line that cannot be written is dropped, never
raised (see :class:`_LossyStream`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


class _LossyStream:
    """The process's stderr, dropping what it cannot write.

    Under `alnair up` a service's stderr is a pipe to the supervisor, and a supervisor killed
    with SIGKILL leaves it without a reader: each later log call would raise BrokenPipeError
    wherever it is made — in nats-py's reconnect task (which then ends), in the callback that
    stops a service whose task crashed (before it stops it), in the shutdown's first line.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:  # EPIPE, or EIO from a terminal that went away
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def configure_logging(level: str = "info", fmt: str = "auto", **context: str) -> None:
    """Configure structlog and stdlib logging once per process; bind ``context`` globally."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    stream = _LossyStream(sys.stderr)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=_LEVELS[level], stream=stream, format="%(name)s %(message)s")
    structlog.contextvars.clear_contextvars()
    if context:
        structlog.contextvars.bind_contextvars(**context)


def get_logger(name: str | None = None) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)
