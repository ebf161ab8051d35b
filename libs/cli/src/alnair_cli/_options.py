"""What every `alnair` command shares: the data-directory and bus options, the consoles,
failing with a message, and finding the running platform's bus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from ._platform import BusTarget, PlatformInfo

# No markup parsing of what is printed: names, paths, messages and reasons come from users
# and from the bus, and a "[/x]" in one raised MarkupError (the command died with a traceback;
# "[link=…]" made a link). Styled output is built as Text, or printed with markup=True and
# everything else in it escaped.
out = Console(markup=False)
err = Console(stderr=True, markup=False)

DataDir = Annotated[Path, typer.Option("--data-dir", envvar="ALNAIR_HOME",
                                       help="Where the local platform keeps its state.")]
NatsUrl = Annotated[str | None, typer.Option("--nats-url", envvar="ALNAIR_NATS_URL",
                                             help="Bus to talk to (default: the running platform's).")]


def fail(message: str, code: int = 1) -> typer.Exit:
    """Say what is wrong on stderr; the caller raises the returned exit."""
    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False)
    return typer.Exit(code)


def resolve_nats(data_dir: Path, nats_url: str | None) -> BusTarget:
    """The bus to talk to: ``--nats-url``, else the platform running from ``data_dir``."""
    if nats_url:
        return BusTarget.find(data_dir, nats_url)
    info = PlatformInfo.read(data_dir)
    if info is None:
        raise fail(f"Alnair is not running from {data_dir}: start it with `alnair up` "
                   "(or pass --nats-url)")
    return BusTarget.find(data_dir, info.nats_url)
