"""``alnair job``: submit, list, describe, scale and delete training jobs.

The elastic-job controller owns every job; the CLI only asks (a ``JobCommand`` on
``alnair.cmd.job.<name>``, de-duplicated by its request id) and reads: the ``training_jobs``
bucket holds each job's current state, the JOBS stream every transition with its reason.
A spec is validated here before anything is sent, with the controller's own rules
(``alnair_elastic_job.from_yaml``), so a bad file fails at once with the field and the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from alnair.v1 import job_pb2, platform_pb2
from alnair_common import Bus, PermanentError, StreamFollower, TypedKV, subjects
from alnair_elastic_job import (
    ScaleCommand,
    TransitionError,
    from_proto,
    from_yaml,
    phase_from_proto,
    step,
    submitted,
    to_proto,
)
from alnair_local_agent import JobFiles

from ._run import RunRequest

BUCKET = subjects.TRAINING_JOBS_BUCKET
NAMESPACE = "default"  # a TrainingJob without one is in "default", as in Kubernetes
# How long `alnair job submit` waits for the controller to answer, and then for the
# allocator's first word on a pending job (it divides the cards every second).
ANSWER_SECONDS = 10.0
SETTLE_SECONDS = 1.5


class JobCommandError(PermanentError):
    """A job command that cannot be sent (bad file, unknown job); exit 2."""


def phase_name(phase: int) -> str:
    return job_pb2.JobPhase.Name(phase).removeprefix("JOB_PHASE_").lower()


def submission(path: Path) -> job_pb2.JobCommand:
    try:
        text = path.read_text()
    except OSError as e:
        raise JobCommandError(f"{path}: cannot read it: {e.strerror}") from e
    job = from_yaml(text, str(path))  # JobSpecError (permanent) names the field and the fix
    return job_pb2.JobCommand(name=job.name, namespace=job.namespace, submit=to_proto(job),
                              request_id=uuid.uuid4().hex)


def keep_environment(data_dir: Path, command: job_pb2.JobCommand) -> None:
    """Leave this shell's environment and directory for the job's local workers."""
    JobFiles.of(data_dir / "jobs", command.namespace, command.name).write_submission(
        RunRequest.environment(), os.getcwd())


async def send(bus: Bus, command: job_pb2.JobCommand) -> None:
    await bus.publish(subjects.job_command(command.name), command,
                      msg_id=f"job:{command.request_id}")


async def submit(bus: Bus, command: job_pb2.JobCommand, *, timeout: float = ANSWER_SECONDS,
                 settle: float = SETTLE_SECONDS) -> tuple[job_pb2.JobState | None, bool]:
    """Submit and wait for the controller's answer: (the job's state — after its first
    allocation, when that comes within ``settle`` — or None when it did not answer in time,
    whether it was sent). JobCommandError with the controller's refusal (another job of the
    name is live). The same spec again is the job already there: its state, nothing sent."""
    for r in await records(bus):
        if (r.state.spec.name, r.state.spec.namespace) == (command.name, command.namespace) and \
                r.state.spec == command.submit and not phase_from_proto(r.state.phase).terminal:
            return r.state, False
    obj = f"{command.namespace}/{command.name}"
    states: asyncio.Queue[job_pb2.JobState] = asyncio.Queue()
    refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_state(_: str, state: job_pb2.JobState) -> None:
        if state.spec == command.submit:
            states.put_nowait(state)

    async def on_error(_: str, e: platform_pb2.ErrorEvent) -> None:
        if e.object == obj and not refused.done():
            refused.set_result(e.message)

    subscriptions = [await bus.subscribe(subjects.job_state(command.name), job_pb2.JobState, on_state),
                     await bus.subscribe(subjects.error("elastic-job"), platform_pb2.ErrorEvent, on_error)]
    try:
        await send(bus, command)
        first = asyncio.ensure_future(states.get())
        done, _ = await asyncio.wait({first, refused}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if refused in done:
            first.cancel()
            raise JobCommandError(refused.result())
        if first not in done:
            first.cancel()
            return None, True
        state = first.result()
        if state.phase == job_pb2.JOB_PHASE_PENDING:  # the allocator's first word: granted, or why not
            with contextlib.suppress(TimeoutError):
                state = await asyncio.wait_for(states.get(), settle)
        return state, True
    finally:
        for sub in subscriptions:
            await sub.unsubscribe()


def scale_refusal(r: job_pb2.TrainingJobRecord, workers: int) -> str | None:
    """Why the controller would refuse scaling this job to ``workers`` (its own rule, which
    reads the spec only), or None."""
    try:
        step(from_proto(r.state.spec), submitted(0.0), ScaleCommand(workers), 0.0)
    except TransitionError as e:
        return str(e)
    return None


async def records(bus: Bus) -> list[job_pb2.TrainingJobRecord]:
    kv = await TypedKV.open(bus, BUCKET, job_pb2.TrainingJobRecord)
    return sorted((await kv.current()).values(),
                  key=lambda r: (r.state.spec.namespace, r.state.spec.name))


async def record(bus: Bus, name: str, namespace: str) -> job_pb2.TrainingJobRecord:
    for r in await records(bus):
        if r.state.spec.name == name and r.state.spec.namespace == namespace:
            return r
    raise JobCommandError(f"no training job {namespace}/{name}: see `alnair job ls`")


async def history(bus: Bus, name: str, namespace: str,
                  timeout: float = 10.0) -> list[job_pb2.JobState]:
    """Every transition of the job still on the JOBS stream, oldest first."""
    seen: list[job_pb2.JobState] = []

    async def keep(_: str, state: job_pb2.JobState) -> None:
        if state.spec.namespace == namespace:
            seen.append(state)

    follower = StreamFollower(bus, stream="JOBS", subject=subjects.job_state(name),
                              message_type=job_pb2.JobState, handler=keep)
    await follower.start()
    try:
        await follower.caught_up(timeout)
    finally:
        await follower.stop()
    return seen


def _age(stamp, now: datetime) -> str:  # type: ignore[no-untyped-def]
    if not stamp.seconds:
        return "-"
    seconds = int((now - stamp.ToDatetime(tzinfo=UTC)).total_seconds())
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


WIDE_COLUMNS = 140
"""`alnair job ls` and `describe` put every field in its column from this terminal width up."""


def jobs_table(found: list[job_pb2.TrainingJobRecord], width: int = 200) -> Group:
    """One line per job. Under :data:`WIDE_COLUMNS` the namespace and the reason follow the
    table (``default/resnet  Training``) and the world size is one column (``3/3 in 2..3``):
    squeezed into ten columns every cell was cut to four letters in 80 columns."""
    now = datetime.now(UTC)
    wide = width >= WIDE_COLUMNS
    table = Table(title="Alnair training jobs", title_justify="left")
    columns = ("name", "namespace", "phase", "workers", "target", "min..max", "restarts",
               "goodput", "reason", "in phase") if wide else \
        ("name", "phase", "workers", "restarts", "goodput", "in phase")
    for column in columns:
        table.add_column(column, no_wrap=column != "name", overflow="fold")
    reasons = Table.grid(padding=(0, 2))
    reasons.add_column(no_wrap=True)
    reasons.add_column(overflow="fold")
    for r in found:
        s = r.state
        if wide:
            table.add_row(s.spec.name, s.spec.namespace, phase_name(s.phase), str(s.replicas),
                          str(s.target_replicas), f"{s.spec.min_replicas}..{s.spec.max_replicas}",
                          str(s.restarts), f"{s.goodput_ratio:.0%}", s.reason or "-",
                          _age(s.entered_at, now))
            continue
        table.add_row(s.spec.name, phase_name(s.phase),
                      f"{s.replicas}/{s.target_replicas} in {s.spec.min_replicas}..{s.spec.max_replicas}",
                      str(s.restarts), f"{s.goodput_ratio:.0%}", _age(s.entered_at, now))
        reasons.add_row(f"{s.spec.namespace}/{s.spec.name}", s.reason or "-")
    return Group(table) if wide or not found else Group(table, "", reasons)


def history_table(states: list[job_pb2.JobState], width: int = 200) -> Group:
    """Every transition. Under :data:`WIDE_COLUMNS` each is a line of its figures (``#``,
    time, ``from → to``, reason, workers) with its cause and message on the next, indented:
    in eight columns the message wrapped a word a line (seven lines a transition)."""
    if width >= WIDE_COLUMNS:
        table = Table(title="transitions", title_justify="left")
        for column in ("#", "at", "from", "to", "cause", "reason", "workers", "message"):
            table.add_column(column)
        for s in states:
            table.add_row(str(s.generation), _clock(s), phase_name(s.previous_phase),
                          phase_name(s.phase), s.cause or "-", s.reason or "-",
                          f"{s.replicas}/{s.target_replicas}", s.message)
        return Group(table)
    rows = [("#", "at", "from → to", "reason", "workers")] + [
        (str(s.generation), _clock(s), f"{phase_name(s.previous_phase)} → {phase_name(s.phase)}",
         s.reason or "-", f"{s.replicas}/{s.target_replicas}") for s in states]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines: list[Text | Padding] = [Text("transitions", style="italic")]
    for n, r in enumerate(rows):
        lines.append(Text("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(),
                          style="bold" if n == 0 else "", no_wrap=True, overflow="ellipsis"))
        if n:
            s = states[n - 1]
            lines.append(Padding(Text(f"{s.cause or '-'}: {s.message}", overflow="fold"),
                                 (0, 0, 0, widths[0] + 2)))
    return Group(*lines)


def _clock(s: job_pb2.JobState) -> str:
    return s.observed_at.ToDatetime(tzinfo=UTC).strftime("%H:%M:%S") if s.observed_at.seconds else "-"
