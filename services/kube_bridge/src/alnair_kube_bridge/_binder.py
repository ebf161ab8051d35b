"""Carry out the scheduler's BindDecisions: one Binding that also carries the annotations.

The apiserver merges a Binding's annotations into the pod in the same write that sets its
node, with the pod's UID as precondition, so whatever starts the container (the device
plugin on the node) finds the card the scheduler chose the moment the pod lands there — and
a bind costs one API call, not a read, a patch and a Binding (the end-to-end bottleneck
under a burst: each call also wakes every pod watcher). Only a refused Binding reads the
pod, to tell the cases apart: a replayed decision for a pod already bound to the chosen
node is answered ok again; a pod bound elsewhere, gone, being deleted or recreated under
the same name is answered not ok with the API's reason, and the decision is settled
(retrying cannot help); anything else is retried.

A decision is carried out only if the share it names is committed in ``gpu_allocations`` as
decided (:mod:`alnair_common.allocations`): otherwise it is refused for good — answered not
ok, counted, logged, terminated — and the pod is not touched.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from google.protobuf import json_format
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from alnair.v1 import common_pb2, scheduling_pb2
from alnair_common import Bus, PermanentError, get_logger, publish_error, subjects
from alnair_common.allocations import UncommittedShareError, committed_shares
from alnair_common.annotations import FILTER_TIMESTAMP, GPU_ASSIGNMENT

from . import _metrics
from ._kube_errors import KubeApiError, classify
from ._kube_events import record_event

log = get_logger("alnair.kube-bridge.bind")


@dataclass(frozen=True)
class Placement:
    """A validated BindDecision for a pod."""

    uid: str
    namespace: str
    name: str
    node: str
    assignment_json: str
    filtered_at: str
    decision: scheduling_pb2.BindDecision

    @classmethod
    def from_proto(cls, d: scheduling_pb2.BindDecision) -> Placement:
        w, a = d.workload, d.assignment
        missing = [n for n, v in (("workload.uid", w.uid), ("workload.name", w.name),
                                  ("workload.namespace", w.namespace), ("assignment.node", a.node),
                                  ("assignment.gpu_uuid", a.gpu_uuid)) if not v]
        if missing:
            raise PermanentError(f"BindDecision for {w.namespace}/{w.name} lacks "
                                 f"{', '.join(missing)}; the scheduler must set them")
        if not 1 <= a.compute_percent <= 100:
            raise PermanentError(f"BindDecision for {w.namespace}/{w.name}: compute_percent "
                                 f"{a.compute_percent} is outside 1..100")
        filtered = (a.filtered_at.ToDatetime(tzinfo=UTC) if a.HasField("filtered_at")
                    else d.decided_at.ToDatetime(tzinfo=UTC))
        return cls(w.uid, w.namespace, w.name, a.node,
                   json_format.MessageToJson(a, indent=None),
                   filtered.isoformat().replace("+00:00", "Z"), d)


class Binder:
    def __init__(self, bus: Bus, core: k8s.CoreV1Api, namespace: str = "", *,
                 concurrency: int = 8) -> None:
        self.bus = bus
        self.core = core
        self.namespace = namespace
        # Its own threads: the loop's default pool has only cpu_count + 4 (6 on 2 cores),
        # fewer than the binds the consumer runs at once, and is shared with the commands.
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="bind")

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def handle(self, _subject: str, decision: scheduling_pb2.BindDecision) -> None:
        if decision.workload.mode != common_pb2.MODE_KUBERNETES:
            return  # the local agent's
        if self.namespace and decision.workload.namespace != self.namespace:
            return  # another bridge's namespace
        try:
            placement = Placement.from_proto(decision)
        except PermanentError as e:
            await self._answer(decision, ok=False, reason=str(e))
            return
        await self._check_committed(decision)
        try:
            await asyncio.get_running_loop().run_in_executor(self._threads, self._bind,
                                                             placement)
        except KubeApiError as e:
            await self._answer(decision, ok=False, reason=str(e))
            return
        await self._answer(decision, ok=True, reason="")
        # Why this card, where users look (`kubectl describe pod`): kube-scheduler's
        # "Scheduled" Event, with the scheduler's reasons. After the answer, on the bind
        # threads: an Event that cannot be written costs the bind nothing.
        asyncio.get_running_loop().run_in_executor(self._threads, self._scheduled_event, placement)

    def _scheduled_event(self, p: Placement) -> None:
        a = p.decision.assignment
        message = (f"Successfully assigned {p.namespace}/{p.name} to {p.node} (GPU {a.gpu_uuid}, "
                   f"{a.memory_gib} GiB, {a.compute_percent} % compute)")
        if p.decision.reason:
            message += f": {p.decision.reason}"
        try:
            record_event(self.core, k8s.V1ObjectReference(
                api_version="v1", kind="Pod", namespace=p.namespace, name=p.name, uid=p.uid),
                type="Normal", reason="Scheduled", message=message,
                key=f"scheduled:{p.uid}:{p.node}:{a.gpu_uuid}", when=datetime.now(UTC))
        except Exception as e:  # noqa: BLE001 - the pod is bound; only its Event is missing
            log.info("scheduled event not written", pod=f"{p.namespace}/{p.name}", error=str(e))

    async def _check_committed(self, d: scheduling_pb2.BindDecision) -> None:
        """Refuse a decision whose share ``gpu_allocations`` does not hold as decided: answer
        not ok and raise, so the consumer terminates it (and publishes the error event)."""
        try:
            await (await committed_shares(self.bus)).check(d.workload, d.assignment)
        except UncommittedShareError as e:
            _metrics.BINDS_REFUSED.labels(e.reason).inc()
            log.warning("bind decision refused", reason=e.reason,
                        pod=f"{d.workload.namespace}/{d.workload.name}", uid=d.workload.uid,
                        node=d.assignment.node, gpu=d.assignment.gpu_uuid, detail=str(e))
            # Its own message id: JetStream must not drop the real decision's answer (same
            # pod and node) as a duplicate of this one.
            a = d.assignment
            await self._answer(d, ok=False, reason=str(e), error_event=False, msg_id=(
                f"refused:{d.workload.uid}:{a.node}:{a.gpu_uuid}:{a.memory_gib}:{a.compute_percent}"))
            raise

    def _bind(self, p: Placement) -> None:
        what = f"bind pod {p.namespace}/{p.name} to {p.node}"
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": p.name, "uid": p.uid,
                             "annotations": {GPU_ASSIGNMENT: p.assignment_json,
                                             FILTER_TIMESTAMP: p.filtered_at}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": p.node}}
        try:
            # The answer is a Status, not a Binding: read it raw, and to the end — a
            # connection handed back with unread bytes is either dropped (a new TLS
            # handshake for the next bind) or, read by the next request, garbles its answer.
            response = self.core.create_namespaced_pod_binding(p.name, p.namespace, body,
                                                               _preload_content=False)
            response.drain_conn()
            response.release_conn()
        except ApiException as e:
            if e.status != 409:
                raise classify(e, what) from e
            self._refused(p, what, e)
            return
        except Exception as e:  # noqa: BLE001 - connection errors are temporary
            raise classify(e, what) from e
        log.info("pod bound", pod=f"{p.namespace}/{p.name}", node=p.node)

    def _refused(self, p: Placement, what: str, refusal: ApiException) -> None:
        """A 409 on the Binding: done already (a replay), or why it never can be."""
        try:
            pod = self.core.read_namespaced_pod(p.name, p.namespace)
        except Exception as e:  # noqa: BLE001 - classified below
            raise classify(e, what) from e
        if pod.metadata.uid != p.uid:
            raise KubeApiError(f"{what}: pod was recreated (uid {pod.metadata.uid}, the "
                               f"decision is for {p.uid})", 409)
        if pod.spec.node_name == p.node:
            return  # a replay: already done, annotations and all
        if pod.spec.node_name:
            raise KubeApiError(f"{what}: already bound to {pod.spec.node_name}", 409)
        if pod.metadata.deletion_timestamp is not None:
            raise KubeApiError(f"{what}: pod is being deleted", 409)
        raise classify(refusal, what) from refusal

    async def _answer(self, d: scheduling_pb2.BindDecision, *, ok: bool, reason: str,
                      error_event: bool = True, msg_id: str | None = None) -> None:
        result = scheduling_pb2.BindResult(workload=d.workload, ok=ok, reason=reason,
                                           assignment=d.assignment)
        if not ok:
            log.warning("bind failed", workload=d.workload.name, reason=reason)
            if error_event:
                await publish_error(self.bus, code="bind-failed", message=reason,
                                    subject=subjects.sched_bind(),
                                    obj=f"{d.workload.namespace}/{d.workload.name}")
        await self.bus.publish(subjects.sched_bound(), result, msg_id=msg_id or (
            f"bound:{d.workload.uid}:{d.assignment.node}:{int(ok)}"))
