"""`alnair job ls` and `alnair job describe` in an 80-column terminal: nothing cut."""

from __future__ import annotations

from rich.console import Console

from alnair.v1 import job_pb2
from alnair_cli._job import WIDE_COLUMNS, history_table, jobs_table

SPEC = job_pb2.JobSpec(name="resnet-imagenet", namespace="research", min_replicas=2, max_replicas=4)
MESSAGE = ("worker 96ac875a1c374336991fe1a8a6fc1830 ended (exit code 1: exited with code 1); "
           "2 survivors meet in a new rendezvous, a replacement is asked for (restart 1 of 3)")


def state(generation: int, previous: int, phase: int, reason: str, cause: str, message: str,
          replicas: int) -> job_pb2.JobState:
    s = job_pb2.JobState(spec=SPEC, phase=phase, previous_phase=previous, reason=reason,
                         cause=cause, message=message, replicas=replicas, target_replicas=3,
                         generation=generation, restarts=1, goodput_ratio=0.91)
    s.observed_at.GetCurrentTime()
    s.entered_at.GetCurrentTime()
    return s


HISTORY = [
    state(1, job_pb2.JOB_PHASE_UNSPECIFIED, job_pb2.JOB_PHASE_PENDING, "WaitingForCapacity",
          "submitted", "waiting for the allocator to grant minReplicas workers", 0),
    state(2, job_pb2.JOB_PHASE_RUNNING, job_pb2.JOB_PHASE_SCALING, "WorkerFailed", "worker-exited",
          MESSAGE, 2),
]


def render(renderable, width: int) -> str:  # type: ignore[no-untyped-def]
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_job_ls_in_80_columns_cuts_nothing() -> None:
    text = render(jobs_table([job_pb2.TrainingJobRecord(state=HISTORY[-1])], 80), 80)
    assert "…" not in text, text
    assert max(map(len, text.splitlines())) <= 80, text
    [row] = [line for line in text.splitlines() if "resnet-imagenet" in line and "│" in line]
    for cell in ("scaling", "2/3 in 2..4", " 1 ", "91%"):
        assert cell in row, (cell, row)
    assert "research/resnet-imagenet  WorkerFailed" in text


def test_job_ls_in_a_wide_terminal_has_a_column_each() -> None:
    text = render(jobs_table([job_pb2.TrainingJobRecord(state=HISTORY[-1])], WIDE_COLUMNS), WIDE_COLUMNS)
    [row] = [line for line in text.splitlines() if "resnet-imagenet" in line]
    for cell in ("research", "scaling", "2..4", "WorkerFailed"):
        assert cell in row, (cell, row)


def test_describe_in_80_columns_gives_each_transition_its_line_and_its_message_whole() -> None:
    text = render(history_table(HISTORY, 80), 80)
    assert "…" not in text, text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text
    lines = text.splitlines()
    [second] = [i for i, line in enumerate(lines) if line.startswith("2 ")]
    assert "running → scaling" in lines[second] and "WorkerFailed" in lines[second]
    assert lines[second].rstrip().endswith("2/3")
    following = " ".join(line.strip() for line in lines[second + 1:])
    assert following == f"worker-exited: {MESSAGE}", following
    assert all(line.startswith("   ") for line in lines[second + 1:] if line.strip())
