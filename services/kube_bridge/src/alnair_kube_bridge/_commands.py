"""Commands from the brains: annotate objects, record Events, update custom resource status.

Each command is answered on ``alnair.cmd.result`` with its ``command_id``, also when it
fails (with the API's reason and whether a retry could help). Replays are harmless:
annotating twice writes the same values, an Event is named after its command id (the second
create finds it exists), a status merge-patch is idempotent. Commands about local workloads
(``alnair.local/v1``) belong to the local agent and are left alone.

Objects acted on: v1 Pods and Nodes, ``alnair.centaurus.io`` resources, and the pod owners
the profiler aggregates to (``alnair_common.annotations.OWNER_KINDS``: batch/v1 Job, apps/v1
StatefulSet and ReplicaSet), which only get annotations. Anything else is refused before the
API is asked, so a brain cannot reach further than the bridge's RBAC says.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client as k8s

from alnair.v1 import commands_pb2
from alnair_common import Bus, PermanentError
from alnair_common.annotations import LOCAL_API_VERSION, OWNER_KINDS
from alnair_common.commands import answer, check_annotation_keys

from ._kube_errors import MERGE_PATCH, classify
from ._kube_events import record_event

ALNAIR_GROUP = "alnair.centaurus.io"


@dataclass(frozen=True)
class Target:
    """Where an ObjectRef lives in the API."""

    kind: str
    namespace: str
    name: str
    group: str = ""
    version: str = "v1"
    plural: str = ""

    @classmethod
    def from_ref(cls, ref: commands_pb2.ObjectRef) -> Target:
        if not ref.name:
            raise PermanentError("command object has no name")
        group, _, version = ref.api_version.rpartition("/")
        if ref.api_version == "v1" and ref.kind in ("Pod", "Node"):
            if ref.kind == "Pod" and not ref.namespace:
                raise PermanentError(f"Pod {ref.name!r}: namespace missing")
            return cls(ref.kind, ref.namespace if ref.kind == "Pod" else "", ref.name)
        plural = OWNER_KINDS.get((ref.api_version, ref.kind))
        if plural is None and group == ALNAIR_GROUP and ref.kind:
            plural = ref.kind.lower() + "s"
        if plural is not None:
            if not ref.namespace:
                raise PermanentError(f"{ref.kind} {ref.name!r}: namespace missing")
            return cls(ref.kind, ref.namespace, ref.name, group, version, plural)
        owners = ", ".join(f"{v} {k}" for v, k in OWNER_KINDS)
        raise PermanentError(
            f"kube-bridge acts on v1 Pods and Nodes, {ALNAIR_GROUP} resources and the owners "
            f"{owners}, not {ref.api_version or '?'} {ref.kind or '?'}")


class Commands:
    def __init__(self, bus: Bus, api_client: k8s.ApiClient, namespace: str = "") -> None:
        self.bus = bus
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.namespace = namespace

    async def annotate(self, _s: str, cmd: commands_pb2.AnnotateCommand) -> None:
        await self._run(cmd.command_id, cmd.object, self._annotate, cmd)

    async def event(self, _s: str, cmd: commands_pb2.RecordEventCommand) -> None:
        await self._run(cmd.command_id, cmd.object, self._event, cmd)

    async def status(self, _s: str, cmd: commands_pb2.StatusUpdateCommand) -> None:
        await self._run(cmd.command_id, cmd.object, self._status, cmd)

    async def _run(self, command_id: str, ref: commands_pb2.ObjectRef, work, cmd) -> None:  # type: ignore[no-untyped-def]
        if ref.api_version == LOCAL_API_VERSION:
            return
        if self.namespace and ref.namespace and ref.namespace != self.namespace:
            return
        async def carry_out() -> None:
            if not command_id:
                raise PermanentError("command_id is empty; every command needs a unique id")
            await asyncio.to_thread(work, Target.from_ref(ref), cmd)

        await answer(self.bus, command_id, ref, carry_out, obj=f"{ref.namespace}/{ref.name}")

    def _annotate(self, t: Target, cmd: commands_pb2.AnnotateCommand) -> None:
        check_annotation_keys(cmd.annotations)
        patch = {"metadata": {"annotations": {k: (v or None) for k, v in cmd.annotations.items()}}}
        self._call(f"annotate {t.kind} {t.namespace}/{t.name}", lambda: self._patch(t, patch))

    def _patch(self, t: Target, patch: dict) -> None:
        if t.kind == "Pod" and not t.group:
            self.core.patch_namespaced_pod(t.name, t.namespace, patch, _content_type=MERGE_PATCH)
        elif t.kind == "Node" and not t.group:
            self.core.patch_node(t.name, patch, _content_type=MERGE_PATCH)
        else:  # a custom resource or a built-in owner: the same /apis/<group>/<version> path
            self.custom.patch_namespaced_custom_object(
                t.group, t.version, t.namespace, t.plural, t.name, patch,
                _content_type=MERGE_PATCH)

    def _event(self, t: Target, cmd: commands_pb2.RecordEventCommand) -> None:
        if cmd.type not in ("Normal", "Warning"):
            raise PermanentError(f"event type {cmd.type!r} must be 'Normal' or 'Warning'")
        if not cmd.reason:
            raise PermanentError("event reason is empty (CamelCase, e.g. 'FailedScheduling')")
        when = (cmd.observed_at.ToDatetime(tzinfo=UTC) if cmd.HasField("observed_at")
                else datetime.now(UTC))
        involved = k8s.V1ObjectReference(
            api_version=cmd.object.api_version, kind=cmd.object.kind, name=t.name,
            namespace=t.namespace or None, uid=cmd.object.uid or None)

        def create() -> None:
            record_event(self.core, involved, type=cmd.type, reason=cmd.reason,
                         message=cmd.message, key=cmd.command_id, when=when)

        self._call(f"record event on {t.kind} {t.namespace}/{t.name}", create)

    def _status(self, t: Target, cmd: commands_pb2.StatusUpdateCommand) -> None:
        if t.group != ALNAIR_GROUP:
            raise PermanentError(f"status updates are for {ALNAIR_GROUP} resources, not "
                                 f"{t.group or 'core'}/{t.version} {t.kind}")
        try:
            status = json.loads(cmd.status_json)
        except ValueError as e:
            raise PermanentError(f"status_json is not JSON: {e}") from e
        if not isinstance(status, dict):
            raise PermanentError("status_json must be a JSON object")
        self._call(f"update status of {t.kind} {t.namespace}/{t.name}",
                   lambda: self.custom.patch_namespaced_custom_object_status(
                       t.group, t.version, t.namespace, t.plural, t.name, {"status": status},
                       _content_type=MERGE_PATCH))

    @staticmethod
    def _call(what: str, call) -> None:  # type: ignore[no-untyped-def]
        try:
            call()
        except Exception as e:  # noqa: BLE001 - classified: permanent reported, temporary retried
            raise classify(e, what) from e
