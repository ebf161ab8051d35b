"""``alnair status``: the local platform's services and their health."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from alnair.v1 import platform_pb2

_STATE = {
    platform_pb2.PROCESS_STATE_STARTING: "starting",
    platform_pb2.PROCESS_STATE_RUNNING: "running",
    platform_pb2.PROCESS_STATE_BACKOFF: "restarting",
    platform_pb2.PROCESS_STATE_STOPPED: "stopped",
}


def healthy(status: platform_pb2.PlatformStatus) -> bool:
    return bool(status.services) and all(
        s.state == platform_pb2.PROCESS_STATE_RUNNING and s.HasField("health") and s.health.ready
        for s in status.services
    )


WIDE_COLUMNS = 140
"""`alnair status` shows each service's role from this terminal width up."""


def status_table(status: platform_pb2.PlatformStatus, width: int = 200) -> Table:
    """One line per service; its role (a sentence) only in a terminal of :data:`WIDE_COLUMNS`
    or more, where it fits on the line (in 80 columns it wrapped every service to 7–9 lines)."""
    wide = width >= WIDE_COLUMNS
    table = Table(title=f"Alnair local platform — NATS {status.nats_url}", title_justify="left")
    for column in ("service", "state", "pid", "restarts", "health", *(("role",) if wide else ())):
        table.add_column(column, no_wrap=column not in ("health", "role"), overflow="fold")
    for s in status.services:
        if not s.HasField("health"):
            health = Text("no answer", style="red")
        elif s.health.ready:
            health = Text("ready", style="green")
        else:
            failing = ", ".join(f"{k}: {v}" for k, v in s.health.checks.items() if v != "ok")
            health = Text.assemble(("not ready", "yellow"), f" ({failing})")
        role = s.health.role if s.HasField("health") else ""
        table.add_row(s.name, _STATE.get(s.state, "?"), str(s.pid), str(s.restarts), health,
                      *((role,) if wide else ()))
    return table
