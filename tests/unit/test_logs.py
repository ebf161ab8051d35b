"""Logging to a stderr nobody reads any more drops the line: it never raises.

A service's stderr under `alnair up` is a pipe to the supervisor; once that is killed, a log
call that raised BrokenPipeError ended nats-py's reconnect task and kept a crashed task's
callback from stopping the service."""

from __future__ import annotations

import subprocess
import sys

LOG_AFTER_THE_READER_LEFT = """
import logging, sys
from alnair_common import configure_logging, get_logger

configure_logging("info", "{fmt}", service="t")
sys.stdin.readline()  # the test closes our stderr's read end first
get_logger("alnair.t").warning("nobody reads this", n=1)
logging.getLogger("alnair.t").warning("nor this")
print("still here", flush=True)
"""


def test_log_calls_survive_a_stderr_without_reader() -> None:
    for fmt in ("console", "json"):
        proc = subprocess.Popen([sys.executable, "-c", LOG_AFTER_THE_READER_LEFT.format(fmt=fmt)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        proc.stderr.close()
        out, _ = proc.communicate("go\n", timeout=30)
        assert (proc.returncode, out) == (0, "still here\n"), fmt
