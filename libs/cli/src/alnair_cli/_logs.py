"""``alnair logs NAME``: a local workload's output, from its workspace (optionally followed)."""

from __future__ import annotations

import asyncio
import sys

from alnair_common import Bus
from alnair_lifecycle import TERMINAL, LifecyclePublisher
from alnair_local_agent import Workspace

from ._workloads import all_workloads, find


async def show_logs(bus: Bus, ws_for, key: str, *, follow: bool) -> str | None:  # type: ignore[no-untyped-def]
    """Write the output to stdout; return an error message if there is nothing to show."""
    found = find(await all_workloads(bus), key)
    if found is None:
        return (f"no workload named {key!r} (or with a uid starting so): see `alnair ps`")
    workspace: Workspace = ws_for(found.workload.ref.uid)
    records = await LifecyclePublisher.open(bus, "cli")
    offset = 0
    while True:
        offset = _copy(workspace, offset)
        if not follow:
            break
        current = await records.last(found.workload.ref.uid)
        if current is None or current.workload.phase in TERMINAL:
            _copy(workspace, offset)
            break
        await asyncio.sleep(0.2)
    return None


def _copy(workspace: Workspace, offset: int) -> int:
    try:
        with open(workspace.output, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return offset + len(data)
