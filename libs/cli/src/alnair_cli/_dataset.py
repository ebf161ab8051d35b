"""``alnair dataset add/ls/rm/mount/umount`` and what ``alnair run --dataset`` hands the workload.

The CLI never touches the tier: it asks the cache hydrator on ``alnair.cache.requests``
and follows the answer in the ``cache_datasets`` bucket (the status that names its request
id) or on the hydrator's error subject (a request refused, e.g. a name already used).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text

from alnair.v1 import cache_pb2, platform_pb2
from alnair_common import AlnairError, Bus, PermanentError, TypedKV, subjects
from alnair_common.config import default_data_dir
from alnair_common.dataset_refs import bus_name_problem

from ._options import DataDir, NatsUrl, err, fail, out, resolve_nats
from ._platform import BusTarget
from ._run import RunRequest

BUCKET = subjects.CACHE_DATASETS_BUCKET
PHASES = {cache_pb2.CACHE_PHASE_PENDING: "pending", cache_pb2.CACHE_PHASE_HYDRATING: "hydrating",
          cache_pb2.CACHE_PHASE_READY: "ready", cache_pb2.CACHE_PHASE_FAILED: "failed",
          cache_pb2.CACHE_PHASE_REMOVED: "removed", cache_pb2.CACHE_PHASE_EVICTED: "evicted"}
DONE = (cache_pb2.CACHE_PHASE_READY, cache_pb2.CACHE_PHASE_FAILED)
ACCEPT_TIMEOUT = 15.0
"""Seconds to wait for the hydrator to acknowledge a request before saying it is not running."""

dataset_app = typer.Typer(help="Cache data sets close to the GPUs (S3 or a local/NFS directory).",
                          no_args_is_help=True)


class DatasetCommandError(PermanentError):
    """The hydrator refused a request, or a data set is not there; exit 2."""




WIDE_COLUMNS = 160
"""`alnair dataset ls` puts source and message in the table from this terminal width up."""


def _scaled(n: int) -> tuple[float, str]:
    """``n`` bytes in the largest unit it reaches, rounded as :func:`gib` shows it."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return round(n / size, 1), unit
    return n, "B"


def gib(n: int) -> str:
    value, unit = _scaled(n)
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"


# -- talking to the hydrator -----------------------------------------------------------------


class _Answers:
    """The hydrator's error events naming a data set, collected while a command waits."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.refusals: list[str] = []

    async def follow(self, bus: Bus) -> None:
        async def on_error(_subject: str, event: platform_pb2.ErrorEvent) -> None:
            if f"'{self.name}'" in event.message:
                self.refusals.append(event.message)

        await bus.subscribe(subjects.error("cache-hydrator"), platform_pb2.ErrorEvent, on_error)


async def _bucket(bus: Bus) -> TypedKV[cache_pb2.CacheDatasetStatus]:
    return await TypedKV.open(bus, BUCKET, cache_pb2.CacheDatasetStatus)


def _valid(name: str) -> str:
    problem = bus_name_problem("data set name", name)
    if problem is not None:
        raise DatasetCommandError(problem)
    return name


async def _status(kv: TypedKV[cache_pb2.CacheDatasetStatus],
                  name: str) -> cache_pb2.CacheDatasetStatus | None:
    """The data set's status; None if there is none. DatasetCommandError for a name no data set
    can have (every command looks the name up here)."""
    found = await kv.get(_valid(name))
    return None if found is None else found.value


async def add_dataset(bus: Bus, spec: cache_pb2.CacheDatasetSpec, *, wait: bool,
                      timeout: float, progress: Progress | None = None
                      ) -> cache_pb2.CacheDatasetStatus:
    """Ask for ``spec``; return its status once accepted (or, with ``wait``, once READY or
    FAILED). DatasetCommandError if refused; TimeoutError if nobody answers."""
    answers = _Answers(_valid(spec.name))
    await answers.follow(bus)
    kv = await _bucket(bus)
    request_id = uuid.uuid4().hex
    await bus.publish(subjects.cache_requests(),
                      cache_pb2.CacheDatasetRequest(request_id=request_id, add=spec))
    loop = asyncio.get_running_loop()
    accepted_by = loop.time() + min(timeout, ACCEPT_TIMEOUT)
    deadline = loop.time() + timeout
    task = progress.add_task(spec.name, total=None) if progress is not None else None
    while True:
        if answers.refusals:
            raise DatasetCommandError(answers.refusals[0])
        status = await _status(kv, spec.name)
        mine = status is not None and status.request_id == request_id
        if mine and status is not None:
            if progress is not None and task is not None:
                progress.update(task, total=status.total_bytes or None,
                                completed=status.cached_bytes,
                                description=f"{spec.name} {PHASES.get(status.phase, '?')}")
            if not wait or status.phase in DONE:
                return status
        now = loop.time()
        if not mine and now > accepted_by:
            raise TimeoutError(f"the cache hydrator did not answer within "
                               f"{min(timeout, ACCEPT_TIMEOUT):.0f} s: is it running "
                               "(`alnair status`)?")
        if now > deadline:
            raise TimeoutError(f"data set {spec.name!r} not hydrated within {timeout:.0f} s; "
                               "it goes on in the background (`alnair dataset ls`)")
        await asyncio.sleep(0.1)


async def remove_dataset(bus: Bus, name: str, *, timeout: float) -> None:
    answers = _Answers(name)
    await answers.follow(bus)
    kv = await _bucket(bus)
    if await _status(kv, name) is None:
        raise DatasetCommandError(f"there is no data set {name!r} (see `alnair dataset ls`)")
    await bus.publish(subjects.cache_requests(), cache_pb2.CacheDatasetRequest(
        request_id=uuid.uuid4().hex, remove=cache_pb2.CacheDatasetRemove(name=name)))
    deadline = asyncio.get_running_loop().time() + timeout
    while await _status(kv, name) is not None:
        if answers.refusals:
            raise DatasetCommandError(answers.refusals[0])
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"data set {name!r} not removed within {timeout:.0f} s: is the "
                               "cache hydrator running (`alnair status`)?")
        await asyncio.sleep(0.1)


async def list_datasets(bus: Bus) -> list[cache_pb2.CacheDatasetStatus]:
    kv = await _bucket(bus)
    found = [await _status(kv, key) for key in sorted(await kv.keys())]
    return [s for s in found if s is not None]


def datasets_table(statuses: list[cache_pb2.CacheDatasetStatus], width: int = 200) -> Group:
    """One row of figures per data set; its source and message (a failure's reason can be a
    sentence) follow the table on lines of their own in a terminal narrower than
    :data:`WIDE_COLUMNS`, where squeezed into columns they wrapped a word a line. Names and
    phases are never cut."""
    wide = width >= WIDE_COLUMNS
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "PHASE", "PROGRESS", "CACHED", "FILES", "DEDUP SAVED" if wide else "DEDUP"):
        table.add_column(column, no_wrap=True)
    if wide:
        table.add_column("SOURCE")
        table.add_column("MESSAGE")
    details = Table.grid(padding=(0, 2))
    details.add_column(no_wrap=True)
    details.add_column(overflow="fold")
    for s in statuses:
        phase = PHASES.get(s.phase, "?")
        style = {"ready": "green", "failed": "red"}.get(phase, "yellow")
        message = (f"{s.reason}: " if s.reason else "") + s.message
        progress = f"{_bar(s.progress)} {s.progress:.0%}" if wide else f"{s.progress:.0%}"
        saved = gib(s.dedup_saved_bytes) if wide else " ".join(_short(s.dedup_saved_bytes))
        cached = f"{gib(s.cached_bytes)} / {gib(s.total_bytes)}" if wide else _of(s.cached_bytes, s.total_bytes)
        cells = [s.dataset, Text(phase, style=style), progress, cached, f"{s.files_cached}/{s.files_total}", saved]
        table.add_row(*cells, *((s.source, message) if wide else ()))
        if not wide:
            details.add_row(s.dataset, s.source)
            if message:
                details.add_row("", message)
    return Group(table) if wide or not statuses else Group(table, "", details)


def _of(part: int, whole: int) -> str:
    """``1/20 GiB``, three digits at most; each with its unit where they differ
    (``512 MiB/120 GiB``)."""
    (a, unit_a), (b, unit_b) = _short(part), _short(whole)
    return f"{a}/{b} {unit_b}" if unit_a == unit_b else f"{a} {unit_a}/{b} {unit_b}"


def _short(n: int) -> tuple[str, str]:
    """Three significant digits, whole numbers from 1000 up (1023 B, 1536 GiB: never 1.02e+03)."""
    value, unit = _scaled(n)
    return (f"{value:.3g}" if value < 1000 else f"{value:.0f}"), unit


def _bar(fraction: float, width: int = 12) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def as_json(s: cache_pb2.CacheDatasetStatus) -> dict[str, object]:
    return {"name": s.dataset, "phase": PHASES.get(s.phase, "?"), "reason": s.reason,
            "message": s.message, "source": s.source, "total_bytes": s.total_bytes,
            "cached_bytes": s.cached_bytes, "files_total": s.files_total,
            "files_cached": s.files_cached, "dedup_saved_bytes": s.dedup_saved_bytes,
            "progress": s.progress}


# -- commands --------------------------------------------------------------------------------


def _on_bus(target: BusTarget, work):  # type: ignore[no-untyped-def]
    async def _go():  # type: ignore[no-untyped-def]
        bus = await target.connect()
        try:
            return await work(bus)
        finally:
            await bus.drain()

    return asyncio.run(_go())


@dataset_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The data set's name (what readers ask for).")],
    source: Annotated[str, typer.Argument(help="s3://bucket/prefix or file:///path")],
    include: Annotated[list[str] | None, typer.Option(help="Only paths matching (glob).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Not paths matching (glob).")] = None,
    pin: Annotated[bool, typer.Option(help="Never evict it.")] = False,
    detach: Annotated[bool, typer.Option(help="Return once accepted; do not follow.")] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to follow the hydration.")
                       ] = 3600.0,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """Cache a data set; follow its hydration with a progress bar."""
    if source.startswith("file://") is False and source.startswith("s3://") is False:
        raise fail(f"source {source!r}: use s3://bucket/prefix or file:///absolute/path", 2)
    if source.startswith("file://") and not source.startswith("file:///"):
        source = "file://" + str(Path(source[len("file://"):]).resolve())
    spec = cache_pb2.CacheDatasetSpec(name=name, source=source, include=include or [],
                                      exclude=exclude or [], pin=pin,
                                      owner=os.environ.get("USER", ""))
    target = resolve_nats(data_dir, nats_url)
    columns = (TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(),
               TransferSpeedColumn())
    try:
        with Progress(*columns, console=err, transient=False, disable=detach) as progress:
            status = _on_bus(target, lambda bus: add_dataset(
                bus, spec, wait=not detach, timeout=timeout, progress=progress))
    except DatasetCommandError as e:
        raise fail(str(e), 2) from e
    except (AlnairError, TimeoutError) as e:
        raise fail(f"alnair dataset add: {e}") from e
    phase = PHASES.get(status.phase, "?")
    if status.phase == cache_pb2.CACHE_PHASE_FAILED:
        raise fail(f"data set {name!r} failed ({status.reason}): {status.message}")
    out.print(f"{name}: {phase}. {status.message}", highlight=False)


@dataset_app.command("ls")
def ls(
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """List cached data sets: phase, progress, sizes, dedup savings."""
    target = resolve_nats(data_dir, nats_url)
    try:
        statuses = _on_bus(target, list_datasets)
    except AlnairError as e:
        raise fail(f"alnair dataset ls: {e}") from e
    if json_output:
        print(json.dumps([as_json(s) for s in statuses], indent=2))
    else:
        out.print(datasets_table(statuses, out.width))


@dataset_app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="The data set to remove.")],
    timeout: Annotated[float, typer.Option(min=1)] = 120.0,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """Remove a data set; its chunks are freed unless other data sets share them."""
    target = resolve_nats(data_dir, nats_url)
    try:
        _on_bus(target, lambda bus: remove_dataset(bus, name, timeout=timeout))
    except DatasetCommandError as e:
        raise fail(str(e), 2) from e
    except (AlnairError, TimeoutError) as e:
        raise fail(f"alnair dataset rm: {e}") from e
    out.print(f"{name}: removed")


@dataset_app.command("mount")
def mount(
    name: Annotated[str, typer.Argument(help="The data set to mount.")],
    mountpoint: Annotated[Path, typer.Argument(help="An empty directory.")],
    background: Annotated[bool, typer.Option(
        help="Return once mounted; unmount with `alnair dataset umount MOUNTPOINT`.")] = False,
    allow_other: Annotated[bool, typer.Option(help="Let other users read it.")] = False,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """Mount a data set read-only (FUSE), so code that opens files reads through the cache.

    Runs until interrupted (Ctrl-C) or unmounted, unless --background. Reads come from the
    platform's tier, and from the source for what is not cached (written back)."""
    from alnair_dataset import DatasetError, spawn_mount
    from alnair_dataset import mount as mount_dataset

    target = resolve_nats(data_dir, nats_url)
    try:
        env = dataset_environment(known_dataset(target, name, "mount"), data_dir)
        options = {"tier_url": env["ALNAIR_CACHE_TIER_URL"], "source": env["ALNAIR_DATASET_SOURCE"],
                   "prefix": env["ALNAIR_CACHE_PREFIX"], "allow_other": allow_other}
        if background:
            pid, log = spawn_mount([name], mountpoint, **options)
            out.print(f"{name}: mounted on {mountpoint.resolve()} (pid {pid}, log {log}); "
                      f"`alnair dataset umount {mountpoint}` to unmount", highlight=False)
            return
        err.print(f"{name}: mounting on {mountpoint.resolve()}; Ctrl-C to unmount",
                  highlight=False)
        mount_dataset([name], mountpoint, **options)
    except DatasetCommandError as e:
        raise fail(str(e), 2) from e
    except DatasetError as e:
        raise fail(f"alnair dataset mount: {e}", 2) from e
    except AlnairError as e:
        raise fail(f"alnair dataset mount: {e}") from e
    except KeyboardInterrupt:
        pass


@dataset_app.command("serve-s3")
def serve_s3(
    names: Annotated[list[str], typer.Argument(help="The s3:// data sets to serve.")],
    listen: Annotated[str, typer.Option(help="host:port; keep it on loopback.")] = "127.0.0.1:9494",
    allow_remote: Annotated[bool, typer.Option(
        help="Allow an address other than loopback: requests are not authenticated, so whoever "
             "reaches it reads these data sets with this shell's AWS credentials.")] = False,
    data_dir: DataDir = default_data_dir(),
    nats_url: NatsUrl = None,
) -> None:
    """Serve s3:// data sets read-only over S3, so boto3/s3fs code reads through the cache.

    Point the code at it with AWS_ENDPOINT_URL_S3=http://<listen>: the data sets' objects
    come from the tier (misses from the source, written back, read with this shell's AWS
    settings); writes and other keys are refused with the reason. Runs until Ctrl-C."""
    from alnair_dataset import DatasetError, DatasetReader
    from alnair_dataset.s3_gateway import S3Gateway

    target = resolve_nats(data_dir, nats_url)
    readers: list[DatasetReader] = []
    try:
        for name in names:
            env = dataset_environment(known_dataset(target, name, "serve-s3"), data_dir)
            readers.append(DatasetReader(name, tier_url=env["ALNAIR_CACHE_TIER_URL"],
                                         source=env["ALNAIR_DATASET_SOURCE"],
                                         prefix=env["ALNAIR_CACHE_PREFIX"]))
        gateway = S3Gateway(readers, listen, allow_remote=allow_remote)
    except DatasetCommandError as e:
        raise fail(str(e), 2) from e
    except (DatasetError, ValueError, OSError) as e:
        for r in readers:
            r.close()
        raise fail(f"alnair dataset serve-s3: {e}", 2) from e
    except AlnairError as e:
        raise fail(f"alnair dataset serve-s3: {e}") from e
    err.print(f"serving {gateway.describe()} at {gateway.url}; set AWS_ENDPOINT_URL_S3={gateway.url} "
              "in the code's environment; Ctrl-C to stop", highlight=False)
    gateway.serve()


@dataset_app.command("umount")
def umount(
    mountpoint: Annotated[Path, typer.Argument(help="Where `alnair dataset mount` mounted it.")],
) -> None:
    """Unmount a data set mounted with `alnair dataset mount`."""
    from alnair_dataset import DatasetError, unmount

    try:
        unmount(mountpoint)
    except DatasetError as e:
        raise fail(f"alnair dataset umount: {e}", 2) from e
    out.print(f"{mountpoint.resolve()}: unmounted", highlight=False)


# -- alnair run --dataset ----------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetRunRequest(RunRequest):
    """A run request whose workload also gets what the data client reads (alnair_dataset)."""

    dataset_env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:  # type: ignore[override]
        return {**RunRequest.environment(), **self.dataset_env}


def dataset_environment(status: cache_pb2.CacheDatasetStatus, data_dir: Path) -> dict[str, str]:
    """The variables alnair_dataset.DatasetReader reads: the name, the tier, the source. The
    tier is the hydrator's: ALNAIR_CACHE_TIER_URL if set (as `alnair up` then passed it on),
    else its default, the directory tier under the platform's data directory."""
    tier = os.environ.get("ALNAIR_CACHE_TIER_URL") or f"dir://{data_dir.resolve()}/cache"
    return {"ALNAIR_DATASET": status.dataset, "ALNAIR_DATASET_SOURCE": status.source,
            "ALNAIR_CACHE_TIER_URL": tier,
            "ALNAIR_CACHE_PREFIX": os.environ.get("ALNAIR_CACHE_PREFIX", "alnair")}


def known_dataset(target: BusTarget, name: str, what: str) -> cache_pb2.CacheDatasetStatus:
    """The status of data set ``name``; DatasetCommandError (naming ``what`` asked) if unknown."""
    async def lookup(bus: Bus) -> cache_pb2.CacheDatasetStatus | None:
        return await _status(await _bucket(bus), name)

    status = _on_bus(target, lookup)
    if status is None:
        raise DatasetCommandError(f"{what} {name!r}: no such data set; add it first with "
                                  f"`alnair dataset add {name} SOURCE`")
    return status


def with_dataset(request: RunRequest, target: BusTarget, name: str,
                 data_dir: Path) -> DatasetRunRequest:
    """``request`` plus the data set's environment; DatasetCommandError if it is unknown."""
    status = known_dataset(target, name, "--dataset")
    return DatasetRunRequest(request.command, request.memory_gib, request.compute_percent,
                             request.name, request.uid, dataset_environment(status, data_dir))
