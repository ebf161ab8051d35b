"""The ``alnair`` command line."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated

import typer
from google.protobuf.json_format import MessageToDict
from rich.console import Console

from alnair.v1 import platform_pb2
from alnair_common import AlnairError, Bus, ConfigError, subjects
from alnair_common.config import default_data_dir

from ._events import tail
from ._platform import PlatformInfo
from ._status import healthy, status_table
from ._up import Platform

app = typer.Typer(help="Alnair: share GPUs between AI workloads.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
out = Console()
err = Console(stderr=True)

DataDir = Annotated[Path, typer.Option("--data-dir", envvar="ALNAIR_HOME",
                                       help="Where the local platform keeps its state.")]
NatsUrl = Annotated[str | None, typer.Option("--nats-url", envvar="ALNAIR_NATS_URL",
                                             help="Bus to talk to (default: the running platform's).")]


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def resolve_nats(data_dir: Path, nats_url: str | None) -> str:
    if nats_url:
        return nats_url
    info = PlatformInfo.read(data_dir)
    if info is None:
        raise fail(f"Alnair is not running from {data_dir}: start it with `alnair up` "
                   "(or pass --nats-url)")
    return info.nats_url


@app.command()
def up(
    data_dir: DataDir = default_data_dir(),
    port: Annotated[int, typer.Option(min=1, max=65535, help="NATS port.")] = 4222,
) -> None:
    """Start the local platform: embedded NATS with JetStream and the services."""
    running = PlatformInfo.read(data_dir)
    if running is not None:
        raise fail(f"Alnair already runs from {data_dir} (pid {running.pid}, "
                   f"{running.nats_url}); stop it first or use another --data-dir")
    try:
        asyncio.run(Platform(data_dir, port, out).run())
    except AlnairError as e:
        raise fail(str(e)) from e


@app.command()
def status(
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show what runs and its health. Exit 0 only when every service is ready."""
    url = resolve_nats(data_dir, nats_url)

    async def _ask() -> platform_pb2.PlatformStatus:
        bus = await Bus.connect(url, service="cli", first_connect_attempts=2)
        try:
            return await bus.request(subjects.platform_status(), platform_pb2.StatusRequest(),
                                     platform_pb2.PlatformStatus, timeout=3.0)
        finally:
            await bus.drain()

    try:
        answer = asyncio.run(_ask())
    except AlnairError as e:
        raise fail(f"no status from the platform at {url}: {e}") from e
    if as_json:
        print(json.dumps(MessageToDict(answer, preserving_proto_field_name=True), indent=2))
    else:
        out.print(status_table(answer))
    if not healthy(answer):
        raise typer.Exit(1)


@app.command()
def events(
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
    subject: Annotated[str, typer.Option(help="Subject pattern to follow.")] = "alnair.>",
    count: Annotated[int | None, typer.Option(min=1, help="Stop after N messages.")] = None,
    requests: Annotated[bool, typer.Option(help="Also show health/status queries.")] = False,
) -> None:
    """Tail the bus with every message decoded."""
    url = resolve_nats(data_dir, nats_url)

    async def _tail() -> None:
        bus = await Bus.connect(url, service="cli", first_connect_attempts=2)
        try:
            await tail(bus, subject, count, lambda line: print(line, flush=True),
                       requests=requests)
        finally:
            await bus.drain()

    try:
        asyncio.run(_tail())
    except KeyboardInterrupt:
        pass
    except (AlnairError, ConfigError) as e:
        raise fail(str(e)) from e


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":
    main()
