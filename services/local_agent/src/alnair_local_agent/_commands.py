"""Commands from the brains about local workloads (``alnair.local/v1`` Workload objects).

The profiler annotates a finished workload with its utilisation summary and the scheduler
records why a workload is pending; in local mode there is no API server to keep them, so
the agent keeps annotations on the workload's record (``alnair ps`` shows them) and appends
events to ``events.log`` in its workspace. Every command gets a result, as kube-bridge
gives one; commands about other agents' workloads are left to them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from alnair.v1 import commands_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, PermanentError, subjects
from alnair_common.annotations import LOCAL_API_VERSION
from alnair_common.commands import answer, check_annotation_keys
from alnair_lifecycle import LifecyclePublisher

from ._workspace import Workspace


class LocalCommands:
    def __init__(self, bus: Bus, lifecycle: LifecyclePublisher, workloads_dir: Path) -> None:
        self.bus = bus
        self.lifecycle = lifecycle
        self.workloads_dir = workloads_dir

    async def annotate(self, _s: str, cmd: commands_pb2.AnnotateCommand) -> None:
        await self._run(cmd.command_id, cmd.object, self._annotate, cmd)

    async def event(self, _s: str, cmd: commands_pb2.RecordEventCommand) -> None:
        await self._run(cmd.command_id, cmd.object, self._event, cmd)

    async def status(self, _s: str, cmd: commands_pb2.StatusUpdateCommand) -> None:
        await self._run(cmd.command_id, cmd.object, self._status, cmd)

    async def _run(self, command_id: str, ref: commands_pb2.ObjectRef, work, cmd) -> None:  # type: ignore[no-untyped-def]
        if ref.api_version != LOCAL_API_VERSION:
            return  # kube-bridge's
        last = await self.lifecycle.last(ref.uid) if ref.uid else None
        if last is not None and last.source != self.lifecycle.source:
            return  # another machine's agent

        async def carry_out() -> None:
            if last is None:
                raise PermanentError(f"NotFound: no local workload with uid {ref.uid!r} "
                                     f"({ref.name or 'no name'})")
            await work(last.workload, cmd)

        await answer(self.bus, command_id, ref, carry_out, obj=ref.uid)

    async def _annotate(self, w: wl.Workload, cmd: commands_pb2.AnnotateCommand) -> None:
        check_annotation_keys(cmd.annotations)

        def change(current: wl.WorkloadEvent | None) -> wl.WorkloadEvent:
            if current is None:
                raise PermanentError(f"NotFound: workload {w.ref.uid} vanished")
            for key, value in cmd.annotations.items():
                if value:
                    current.workload.annotations[key] = value
                else:
                    current.workload.annotations.pop(key, None)
            return current

        await self.lifecycle.kv.mutate(subjects.token(w.ref.uid), change)

    async def _event(self, w: wl.Workload, cmd: commands_pb2.RecordEventCommand) -> None:
        if cmd.type not in ("Normal", "Warning") or not cmd.reason:
            raise PermanentError(f"event needs type 'Normal' or 'Warning' (got {cmd.type!r}) "
                                 f"and a reason (got {cmd.reason!r})")
        when = (cmd.observed_at.ToDatetime(tzinfo=UTC) if cmd.HasField("observed_at")
                else datetime.now(UTC))
        line = json.dumps({"time": when.isoformat(), "type": cmd.type, "reason": cmd.reason,
                           "message": cmd.message, "command_id": cmd.command_id})
        path = Workspace.of(self.workloads_dir, w.ref.uid).path / "events.log"
        if path.parent.is_dir():  # noqa: ASYNC240 - one small append per event
            with open(path, "a") as f:  # noqa: ASYNC230
                f.write(line + "\n")

    async def _status(self, w: wl.Workload, _cmd: commands_pb2.StatusUpdateCommand) -> None:
        raise PermanentError(f"local workload {w.ref.name} has no status to update; status "
                             "updates are for custom resources")
