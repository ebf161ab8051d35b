"""Helpers of the kube-bridge tests (pods, reading streams)."""

from __future__ import annotations

from typing import Any

from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus
from alnair_common.bus import decode


def alnair_pod(name: str, *, memory_gib: int = 8, compute: int = 30,
               labels: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"alnair/vgpu-memory": str(memory_gib), "alnair/vgpu-compute": str(compute)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"schedulerName": "alnair-scheduler",
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": limits, "requests": limits}}]},
    }


async def stream_messages(bus: Bus, stream: str, subject: str, message_type: type) -> list:
    """Every message stored on ``subject`` in ``stream``, in order (what a consumer gets)."""
    info = await bus.js.stream_info(stream)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            msg = await bus.js.get_msg(stream, seq)
        except Exception:  # noqa: BLE001 - deleted sequence
            continue
        if msg.subject == subject:
            found.append(decode(subject, msg.data, message_type))
    return found


async def workload_events(bus: Bus) -> list[wl.WorkloadEvent]:
    return await stream_messages(bus, "WORKLOADS", "alnair.workload.events", wl.WorkloadEvent)


def phases_by_name(events: list[wl.WorkloadEvent]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for e in events:
        out.setdefault(e.workload.ref.name, []).append(e.workload.phase)
    return out
