"""``alnair ps``: every workload (local and, on a cluster's bus, pods) with state, GPU, limits."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Group
from rich.table import Table
from rich.text import Text

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_lifecycle import phase_name

_COLOUR = {"pending": "yellow", "bound": "cyan", "running": "green", "succeeded": "blue",
           "failed": "red", "deleted": "dim"}


def visible(events: list[wl.WorkloadEvent], *, show_all: bool) -> list[wl.WorkloadEvent]:
    return [e for e in events if show_all or e.workload.phase != wl.WORKLOAD_PHASE_DELETED]


def row(e: wl.WorkloadEvent, now: datetime) -> dict[str, str]:
    w = e.workload
    a = w.assignment
    created = w.created_at.ToDatetime(tzinfo=UTC) if w.HasField("created_at") else None
    return {
        "name": w.ref.name, "uid": w.ref.uid[:8],
        "mode": "local" if w.ref.mode == common_pb2.MODE_LOCAL else w.ref.namespace,
        "state": phase_name(w.phase), "node": w.node or "-", "gpu": _card(w, uuid=True),
        "memory_gib": str(a.memory_gib if a.gpu_uuid else w.request.memory_gib),
        "compute_percent": str(a.compute_percent if a.gpu_uuid else w.request.compute_percent),
        "exit": str(w.exit_code) if w.HasField("exit_code") else "-",
        "age": _age(now - created) if created else "-",
        "message": w.message,
    }


WIDE_COLUMNS = 140
"""`alnair ps` shows every column from this terminal width up."""


def ps_table(events: list[wl.WorkloadEvent], width: int = 200) -> Group:
    """One line per workload (a long name folds; figures never wrap). In a terminal narrower than
    :data:`WIDE_COLUMNS` the mode, node and card uuid are left out (``--json`` has them) and
    messages follow the table, one line per workload that has one: squeezed into 11 columns
    every cell was cut to three letters in 80 columns."""
    now = datetime.now(UTC)
    wide = width >= WIDE_COLUMNS
    table = Table(title="Alnair workloads", title_justify="left")
    columns = ("name", "uid", "mode", "state", "node", "gpu", "GiB", "GPU %", "exit", "age",
               "message") if wide else ("name", "uid", "state", "gpu", "GiB", "GPU %", "exit", "age")
    for column in columns:
        table.add_column(column, no_wrap=column not in ("name", "message"), overflow="fold")
    messages = Table.grid(padding=(0, 2))
    messages.add_column(no_wrap=True)
    messages.add_column(overflow="fold")
    for e in events:
        r = row(e, now)
        state = Text(r["state"], style=_COLOUR.get(r["state"], "white"))
        if wide:
            table.add_row(r["name"], r["uid"], r["mode"], state, r["node"], r["gpu"],
                          r["memory_gib"], r["compute_percent"], r["exit"], r["age"], r["message"])
            continue
        table.add_row(r["name"], r["uid"], state, _card(e.workload, uuid=False), r["memory_gib"],
                      r["compute_percent"], r["exit"], r["age"])
        if r["message"]:
            messages.add_row(f"{r['name']} ({r['uid']})", r["message"])
    return Group(table) if wide or not messages.rows else Group(table, "", messages)


def _card(w: wl.Workload, *, uuid: bool) -> str:
    """The card: its index on the node, then ``:<uuid>`` if asked, `` (sim)`` for a simulated
    one (``0:GPU-…-80g (sim)``, ``0 (sim)``); ``-`` before it is bound."""
    a = w.assignment
    if not a.gpu_uuid:
        return "-"
    simulated = w.annotations.get("ai.centaurus.io/simulated-gpu") == "true"
    return f"{a.gpu_index}" + (f":{a.gpu_uuid}" if uuid else "") + (" (sim)" if simulated else "")


def _age(delta) -> str:  # type: ignore[no-untyped-def]
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
