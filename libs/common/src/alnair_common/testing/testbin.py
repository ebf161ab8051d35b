"""Where the test plane's binaries are: the directory `scripts/testbin` prints.

The fixtures never build or download anything. ``ALNAIR_TESTBIN`` names the directory
(CI exports the last line of ``scripts/testbin``); without it the harness uses the
``current`` link that the script leaves in its cache. A missing binary is an error that
names the script to run: the suite must fail loudly rather than skip the real servers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ._plane_errors import BinaryMissingError

ENV_VAR = "ALNAIR_TESTBIN"
"""Environment variable naming the bin directory printed by ``scripts/testbin``."""


def default_bin_dir() -> Path:
    """The bin directory of the last complete ``scripts/testbin`` run on this machine."""
    cache = Path(os.environ.get("ALNAIR_CACHE", Path.home() / ".cache" / "alnair"))
    return cache / "testbin" / "current" / "bin"


@dataclass(frozen=True)
class Testbin:
    """A directory of test binaries; ``path(name)`` checks that the binary is there."""

    __test__ = False  # a dataclass named Test*: tell pytest it is not a test class

    directory: Path

    def path(self, name: str) -> Path:
        """The absolute path of binary ``name``; raises BinaryMissingError if absent."""
        candidate = self.directory / name
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise BinaryMissingError(
                f"test binary {name!r} not found at {candidate} (directory from "
                f"{'$' + ENV_VAR if ENV_VAR in os.environ else 'the default cache'}); "
                f"run `scripts/testbin` and `export {ENV_VAR}=$(scripts/testbin | tail -1)`"
            )
        return candidate


def locate() -> Testbin:
    """The test binaries from ``$ALNAIR_TESTBIN`` or the default cache."""
    configured = os.environ.get(ENV_VAR)
    directory = Path(configured) if configured else default_bin_dir()
    if not directory.is_dir():
        raise BinaryMissingError(
            f"test binary directory {directory} does not exist"
            f"{' ($' + ENV_VAR + ')' if configured else ''}; run `scripts/testbin` "
            f"(builds Kubernetes, etcd, kwok and FerretDB, about 6 min cold on 2 cores) and "
            f"`export {ENV_VAR}=$(scripts/testbin | tail -1)`"
        )
    return Testbin(directory.resolve())
