"""The ``alnair`` command line."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.markup import escape

from alnair.v1 import platform_pb2
from alnair_common import AlnairError, ConfigError, subjects
from alnair_common.config import default_data_dir

from ._dataset import DatasetCommandError, dataset_app, with_dataset
from ._events import tail
from ._interceptor import choose_interceptor
from ._job_commands import job_app
from ._logs import show_logs
from ._options import DataDir, NatsUrl, err, fail, out, resolve_nats
from ._platform import PlatformInfo
from ._ps import ps_table, visible
from ._ps import row as ps_row
from ._run import RunError, Runner, RunRequest
from ._status import healthy, status_table
from ._up import Platform, agent_env
from ._workloads import all_workloads, workspace

app = typer.Typer(help="Alnair: share GPUs between AI workloads.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
app.add_typer(dataset_app, name="dataset")
app.add_typer(job_app, name="job")


@app.command()
def up(
    data_dir: DataDir = default_data_dir(),
    port: Annotated[int, typer.Option(min=1, max=65535, help="NATS port.")] = 4222,
    gpus: Annotated[str | None, typer.Option(
        help="GPUs for the local agent: a simulated inventory such as sim:2x80 (default: the "
             "machine's GPUs through NVML).")] = None,
    interceptor: Annotated[Path | None, typer.Option(
        envvar="ALNAIR_INTERCEPTOR_LIB",
        help="libalnair_cuda.so to preload into workloads (default where NVML finds GPUs: the one "
             "make -C native/cuda_intercept lib built).")
    ] = None,
    no_interceptor: Annotated[bool, typer.Option(
        "--no-interceptor",
        help="Run real GPUs WITHOUT the interceptor: GPU memory and compute limits are not enforced.")
    ] = False,
    mps: Annotated[bool, typer.Option(
        "--mps",
        help="MPS mode: a CUDA MPS control daemon per GPU; each workload's compute share is an SM "
             "partition (guaranteed) instead of a time slice. Needs the interceptor.")
    ] = False,
) -> None:
    """Start the local platform: embedded NATS with JetStream and the services."""
    running = PlatformInfo.read(data_dir)
    if running is not None:
        raise fail(f"Alnair already runs from {data_dir} (pid {running.pid}, "
                   f"{running.nats_url}); stop it first or use another --data-dir")
    try:
        choice = choose_interceptor(gpus, interceptor, no_interceptor)
        extra_env = agent_env(gpus, interceptor, choice=choice, mps=mps)
    except ConfigError as e:
        raise fail(str(e), code=2) from e
    if choice.loud:
        err.print(f"[bold red]WARNING: {escape(choice.notice)}[/]", markup=True)
    else:
        out.print(f"[dim]{escape(choice.notice)}[/]", markup=True)
    try:
        # its own console with markup: the platform's lines escape every name, path and log line
        asyncio.run(Platform(data_dir, port, Console(), extra_env).run())
    except AlnairError as e:
        raise fail(str(e)) from e


@app.command()
def status(
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show what runs and its health. Exit 0 only when every service is ready."""
    target = resolve_nats(data_dir, nats_url)

    async def _ask() -> platform_pb2.PlatformStatus:
        bus = await target.connect()
        try:
            return await bus.request(subjects.platform_status(), platform_pb2.StatusRequest(),
                                     platform_pb2.PlatformStatus, timeout=3.0)
        finally:
            await bus.drain()

    try:
        answer = asyncio.run(_ask())
    except AlnairError as e:
        raise fail(f"no status from the platform at {target.url}: {e}") from e
    if as_json:
        print(json.dumps(MessageToDict(answer, preserving_proto_field_name=True), indent=2))
    else:
        out.print(status_table(answer, out.width))
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
    try:
        subjects.check_pattern(subject)
    except AlnairError as e:
        raise fail(f"--subject: {e}", code=2) from e
    target = resolve_nats(data_dir, nats_url)

    async def _tail() -> None:
        bus = await target.connect()
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


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after `--`.")] = None,
    gpu_memory: Annotated[int, typer.Option(help="GiB of GPU memory (hard limit).")] = 1,
    gpu_compute: Annotated[int, typer.Option(help="Percent of one GPU's compute, 1..100.")] = 10,
    name: Annotated[str | None, typer.Option(help="Workload name (default: from the command).")
                    ] = None,
    wait: Annotated[float | None, typer.Option(
        min=0.1, help="Give up (and withdraw) if not placed within this many seconds.")] = None,
    dataset: Annotated[str | None, typer.Option(
        help="A cached data set the workload reads (alnair_dataset finds it by name).")] = None,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """Run a command on a shared GPU as a pod would get it; exit with its exit code."""
    try:
        request = RunRequest.build(command or [], gpu_memory, gpu_compute, name)
    except RunError as e:
        raise fail(str(e), code=2) from e
    target = resolve_nats(data_dir, nats_url)
    if dataset:
        try:
            request = with_dataset(request, target, dataset, data_dir)
        except DatasetCommandError as e:
            raise fail(str(e), code=2) from e

    async def _run() -> int:
        bus = await target.connect()
        try:
            runner = Runner(bus, data_dir, request, lambda line: err.print(
                f"[dim]alnair:[/] {escape(line)}", markup=True, highlight=False, soft_wrap=True))
            return await runner.run(wait_timeout=wait)
        finally:
            await bus.drain()

    try:
        code = asyncio.run(_run())
    except RunError as e:
        raise fail(str(e), code=2) from e
    except AlnairError as e:
        raise fail(f"alnair run: {e}") from e
    raise typer.Exit(code)


@app.command()
def ps(
    show_all: Annotated[bool, typer.Option("--all", "-a", help="Include deleted workloads.")
                        ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """List workloads with their state, GPU and limits."""
    target = resolve_nats(data_dir, nats_url)

    async def _list() -> list:
        bus = await target.connect()
        try:
            return await all_workloads(bus)
        finally:
            await bus.drain()

    try:
        events = visible(asyncio.run(_list()), show_all=show_all)
    except AlnairError as e:
        raise fail(f"alnair ps: {e}") from e
    if as_json:
        now = datetime.now(UTC)
        print(json.dumps([ps_row(e, now) for e in events], indent=2))
    else:
        out.print(ps_table(events, out.width))


@app.command()
def logs(
    workload: Annotated[str, typer.Argument(help="Workload name or uid prefix.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Follow until it ends.")
                      ] = False,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """Print a local workload's output (stdout and stderr)."""
    target = resolve_nats(data_dir, nats_url)

    async def _logs() -> str | None:
        bus = await target.connect()
        try:
            return await show_logs(bus, lambda uid: workspace(data_dir, uid), workload,
                                   follow=follow)
        finally:
            await bus.drain()

    try:
        problem = asyncio.run(_logs())
    except KeyboardInterrupt:
        return
    except AlnairError as e:
        raise fail(f"alnair logs: {e}") from e
    if problem:
        raise fail(problem)


@app.command()
def profile(
    name: Annotated[str, typer.Argument(help="Workload (or owner: Job, PodGroup...) name or uid.")],
    data_dir: DataDir = default_data_dir(),
    mongo_url: Annotated[str | None, typer.Option(
        "--mongo-url", envvar="ALNAIR_MONGO_URL", help="Read this MongoDB instead of the embedded store.")] = None,
    database: Annotated[str, typer.Option(envvar="ALNAIR_MONGO_DATABASE")] = "alnair",
    collection: Annotated[str, typer.Option(envvar="ALNAIR_MONGO_COLLECTION")] = "workload_profiles",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show the recorded profile of a finished workload: maxima, deciles, job type."""
    # Imported here: only this command needs the document-store drivers.
    from alnair_profiler import StoreUnavailableError

    from ._profile import ProfileNotFoundError, lookup, owner_view, store_for, to_json, workload_view

    try:
        store = store_for(data_dir, mongo_url, database, collection)
        try:
            workloads, owners = lookup(store, name)
        finally:
            store.close()
    except ProfileNotFoundError as e:
        raise fail(str(e)) from e
    except StoreUnavailableError as e:
        raise fail(f"alnair profile: {e}") from e
    if as_json:
        print(to_json(workloads, owners))
        return
    for doc in workloads:
        out.print(workload_view(doc))
    for doc in owners:
        out.print(owner_view(doc))


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":
    main()
