"""PodGroup custom resources → ``alnair.podgroup.events``.

A PodGroup is published whenever what the scheduler cares about changes (size, timeout,
phase, scheduled count, deletion) — not on every resourceVersion. The last published
value per uid lives in the ``podgroup_states`` bucket, so a restarted bridge publishes
only real changes and notices groups deleted while it was away.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from alnair.v1 import commands_pb2
from alnair_common import Bus, TypedKV, get_logger, subjects

from ._watch import Changed, Synced

API_VERSION = "alnair.centaurus.io/v1alpha1"
BUCKET = subjects.PODGROUP_STATES_BUCKET
log = get_logger("alnair.kube-bridge.podgroups")


def podgroup(obj: dict[str, Any], *, deleted: bool = False) -> commands_pb2.PodGroup:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    group = commands_pb2.PodGroup(
        ref=commands_pb2.ObjectRef(api_version=API_VERSION, kind="PodGroup",
                                   namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                                   uid=meta.get("uid", "")),
        min_member=int(spec.get("minMember") or 0),
        schedule_timeout_seconds=int(spec.get("scheduleTimeoutSeconds") or 0),
        phase=str(status.get("phase") or ""),
        scheduled=int(status.get("scheduled") or 0),
        deleted=deleted,
    )
    if meta.get("creationTimestamp"):
        group.created_at.FromDatetime(
            datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00")))
    return group


class PodGroupEvents:
    def __init__(self, bus: Bus, kv: TypedKV[commands_pb2.PodGroup], namespace: str = "") -> None:
        self.bus = bus
        self.kv = kv
        self.namespace = namespace

    @classmethod
    async def open(cls, bus: Bus, namespace: str = "") -> PodGroupEvents:
        return cls(bus, await TypedKV.open(bus, BUCKET, commands_pb2.PodGroup), namespace)

    async def handle(self, item: Synced | Changed) -> None:
        if isinstance(item, Changed):
            await self.observe(podgroup(item.obj, deleted=item.type == "DELETED"))
            return
        present = set()
        for obj in item.items:
            group = podgroup(obj)
            present.add(group.ref.uid)
            await self.observe(group)
        for key in await self.kv.keys():
            last = await self.kv.get(key)
            if last is None or last.value.deleted or last.value.ref.uid in present:
                continue
            if self.namespace and last.value.ref.namespace != self.namespace:
                continue
            gone = commands_pb2.PodGroup()
            gone.CopyFrom(last.value)
            gone.deleted = True
            await self.observe(gone)

    async def observe(self, group: commands_pb2.PodGroup) -> None:
        key = subjects.token(group.ref.uid)
        last = await self.kv.get(key)
        if last is not None and (last.value == group or last.value.deleted):
            return
        digest = hashlib.sha256(group.SerializeToString(deterministic=True)).hexdigest()[:16]
        await self.bus.publish(subjects.podgroup_events(), group,
                               msg_id=f"{group.ref.uid}:{digest}")
        await self.kv.put(key, group)
        log.info("podgroup event", name=group.ref.name, phase=group.phase, deleted=group.deleted)
