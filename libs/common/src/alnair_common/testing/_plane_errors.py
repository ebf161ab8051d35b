"""Errors of the test plane (real servers started for the test suite).

A fixture that cannot give a test its real server raises one of these, with the binary,
the port, the seconds waited and the tail of the server's log in the message, so a red
CI run says why without a rerun. They never turn into skips: a missing server is a broken
test environment, not an optional feature.
"""

from __future__ import annotations

from alnair_common.errors import AlnairError


class PlaneError(AlnairError):
    """Root of the test plane's errors."""


class BinaryMissingError(PlaneError):
    """A test binary is not where the harness looks; `scripts/testbin` puts it there."""


class ServerStartError(PlaneError):
    """A server exited or did not become ready before its deadline."""


class WaitTimeoutError(PlaneError, TimeoutError):
    """A condition (a node Ready, a pod Running, a metric scraped) did not hold in time."""
