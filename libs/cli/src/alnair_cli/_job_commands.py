"""The `alnair job` commands (what they do: ``_job``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from alnair.v1 import job_pb2
from alnair_common import AlnairError, Bus, PermanentError
from alnair_common.config import default_data_dir

from . import _job
from ._options import DataDir, NatsUrl, err, fail, out, resolve_nats
from ._platform import BusTarget

T = TypeVar("T")
job_app = typer.Typer(help="Elastic training jobs: submit a TrainingJob, watch it scale, "
                           "scale or delete it.", no_args_is_help=True)
Namespace = Annotated[str, typer.Option(help="The job's namespace (as in its metadata; default: default).")]


def _on_bus(target: BusTarget, work: Callable[[Bus], Awaitable[T]]) -> T:
    async def run() -> T:
        bus = await target.connect()
        try:
            return await work(bus)
        finally:
            await bus.drain()

    try:
        return asyncio.run(run())
    except PermanentError as e:
        raise fail(str(e), 2) from e
    except AlnairError as e:
        raise fail(f"alnair job: {e}") from e


@job_app.command()
def submit(file: Annotated[Path, typer.Argument(help="A TrainingJob YAML file.")],
           data_dir: DataDir = default_data_dir(), nats_url: NatsUrl = None) -> None:
    """Submit a TrainingJob; the controller answers on the job's state (`alnair job ls`)."""
    try:
        command = _job.submission(file)
    except AlnairError as e:  # the spec is checked here, with the controller's own rules
        raise fail(str(e), 2) from e
    # Local mode: the workers start in this shell's directory and environment, like `alnair
    # run`'s command; they go through the data directory, never the bus.
    _job.keep_environment(data_dir, command)
    state, sent = _on_bus(resolve_nats(data_dir, nats_url), lambda bus: _job.submit(bus, command))
    job = f"{command.namespace}/{command.name}"
    if state is None:
        out.print(f"submitted training job {job}; the elastic-job controller has not answered within "
                  f"{_job.ANSWER_SECONDS:g} s (is it running? `alnair status`); `alnair job ls` shows "
                  "the job once it does")
        return
    said = f"{_job.phase_name(state.phase)} ({state.reason}): {state.message}"
    out.print(f"{'submitted' if sent else 'already submitted:'} training job {job}, {said}")
    if state.reason == "Unschedulable":
        err.print(f"warning: training job {job} cannot be placed as asked; it waits in case the "
                  f"cluster grows, up to spec.deadlines.schedulingTimeoutSeconds "
                  f"({state.timeout_seconds:g} s). `alnair job delete {command.name}` to give up")


@job_app.command("ls")
def list_jobs(data_dir: DataDir = default_data_dir(), nats_url: NatsUrl = None) -> None:
    """Every training job with its phase, world size, restarts and goodput."""
    found = _on_bus(resolve_nats(data_dir, nats_url), _job.records)
    out.print(_job.jobs_table(found, out.width))


@job_app.command()
def describe(name: str, namespace: Namespace = _job.NAMESPACE,
             data_dir: DataDir = default_data_dir(), nats_url: NatsUrl = None) -> None:
    """One job: its state now and every transition with its cause and reason."""
    async def read(bus: Bus) -> tuple[job_pb2.TrainingJobRecord, list[job_pb2.JobState]]:
        return await _job.record(bus, name, namespace), await _job.history(bus, name, namespace)

    found, states = _on_bus(resolve_nats(data_dir, nats_url), read)
    out.print(_job.jobs_table([found], out.width))
    out.print(_job.history_table(states, out.width))


def _command(name: str, namespace: str, data_dir: Path, nats_url: str | None,
             **action: object) -> None:
    target = resolve_nats(data_dir, nats_url)

    async def ask(bus: Bus) -> None:
        found = await _job.record(bus, name, namespace)  # an unknown job is said so, not sent
        refusal = _job.scale_refusal(found, action["scale"]) if "scale" in action else None  # type: ignore[arg-type]
        if refusal is not None:
            raise _job.JobCommandError(refusal)
        await _job.send(bus, job_pb2.JobCommand(name=name, namespace=namespace,
                                                request_id=uuid.uuid4().hex, **action))

    _on_bus(target, ask)


@job_app.command()
def scale(name: str, workers: Annotated[int, typer.Argument(min=1, help="Wished world size.")],
          namespace: Namespace = _job.NAMESPACE, data_dir: DataDir = default_data_dir(),
          nats_url: NatsUrl = None) -> None:
    """Drive a job towards WORKERS (within its min..max; capacity permitting)."""
    _command(name, namespace, data_dir, nats_url, scale=workers)
    out.print(f"asked {namespace}/{name} to scale to {workers}")


@job_app.command()
def delete(name: str, namespace: Namespace = _job.NAMESPACE,
           data_dir: DataDir = default_data_dir(), nats_url: NatsUrl = None) -> None:
    """Stop every worker of a job and forget it."""
    _command(name, namespace, data_dir, nats_url, delete=True)
    out.print(f"asked {namespace}/{name} to stop")
