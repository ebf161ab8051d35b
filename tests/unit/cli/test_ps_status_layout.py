"""`alnair ps` and `alnair status` in an 80-column terminal: nothing cut, one line a row."""

from __future__ import annotations

from rich.console import Console

from alnair.v1 import common_pb2, platform_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_cli._ps import WIDE_COLUMNS as PS_WIDE
from alnair_cli._ps import ps_table
from alnair_cli._status import WIDE_COLUMNS as STATUS_WIDE
from alnair_cli._status import status_table


def workload(name: str, uid: str, phase: int, *, card: int | None = None, message: str = "",
             exit_code: int | None = None) -> wl.WorkloadEvent:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid=uid, name=name, namespace="local",
                                               mode=common_pb2.MODE_LOCAL),
                    request=common_pb2.GpuRequest(memory_gib=4, compute_percent=30),
                    phase=phase, node="workstation-1", message=message)
    if card is not None:
        w.assignment.gpu_index = card
        w.assignment.gpu_uuid = f"GPU-sim-000{card}-80g"
        w.assignment.memory_gib, w.assignment.compute_percent = 4, 30
        w.annotations["ai.centaurus.io/simulated-gpu"] = "true"
    if exit_code is not None:
        w.exit_code = exit_code
    w.created_at.GetCurrentTime()
    return wl.WorkloadEvent(workload=w)


EVENTS = [
    workload("resnet-finetune", "70b465f314404f58", wl.WORKLOAD_PHASE_SUCCEEDED, card=0, exit_code=0),
    workload("bert-serve", "a1b2c3d4e5f60718", wl.WORKLOAD_PHASE_PENDING,
             message="no card has 4 GiB and 30 % free; waiting for one to free up"),
]


def render(renderable_of, width: int) -> str:  # type: ignore[no-untyped-def]
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable_of(console.width))
    return console.export_text()


def test_ps_in_80_columns_cuts_no_cell_and_prints_messages_whole() -> None:
    text = render(lambda w: ps_table(EVENTS, w), 80)
    assert "…" not in text, text
    assert max(map(len, text.splitlines())) <= 80, text
    [first] = [line for line in text.splitlines() if "resnet-finetune" in line and "70b465f3" in line]
    for cell in ("succeeded", "0 (sim)", " 4 ", " 30 ", " 0 "):
        assert cell in first, (cell, first)
    assert "pending" in text and "a1b2c3d4" in text
    assert "no card has 4 GiB and 30 % free; waiting for one to free up" in " ".join(text.split())


def test_ps_in_a_wide_terminal_has_every_column_on_the_row() -> None:
    text = render(lambda w: ps_table(EVENTS, w), PS_WIDE + 20)
    [row] = [line for line in text.splitlines() if "bert-serve" in line]
    assert "local" in row and "workstation-1" in row and "no card has 4 GiB" in row
    [bound] = [line for line in text.splitlines() if "resnet-finetune" in line]
    assert "0:GPU-sim-0000-80g (sim)" in bound


STATUS = platform_pb2.PlatformStatus(nats_url="nats://127.0.0.1:4222", services=[
    platform_pb2.SupervisedService(
        name="local-agent", state=platform_pb2.PROCESS_STATE_RUNNING, pid=2813, restarts=0,
        health=platform_pb2.HealthReport(ready=True, role="adapter: runs local workloads (`alnair run`) "
                                       "and training jobs' workers on the GPUs the scheduler picks")),
    platform_pb2.SupervisedService(
        name="cache-hydrator", state=platform_pb2.PROCESS_STATE_RUNNING, pid=2828, restarts=2,
        health=platform_pb2.HealthReport(ready=False, checks={"bus": "ok", "tier": "redis refused"},
                                       role="hydrates data sets from S3 or local directories")),
])


def test_status_in_80_columns_is_one_line_per_service() -> None:
    text = render(lambda w: status_table(STATUS, w), 80)
    assert max(map(len, text.splitlines())) <= 80, text
    [agent] = [line for line in text.splitlines() if "local-agent" in line]
    assert "running" in agent and "2813" in agent and "ready" in agent
    assert "tier: redis refused" in " ".join(text.split()), "a failing check is shown in full"
    assert "adapter: runs local" not in text  # roles only where they fit


def test_status_in_a_wide_terminal_has_each_role() -> None:
    text = render(lambda w: status_table(STATUS, w), STATUS_WIDE + 40)
    [agent] = [line for line in text.splitlines() if "local-agent" in line]
    assert "adapter: runs local workloads" in agent
