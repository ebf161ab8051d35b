"""TrainingJob objects (``alnair.centaurus.io/v1``) ↔ the elastic-job controller.

A TrainingJob is submitted once: its watch event (or a relist) finds no
``status.observedGeneration`` for its ``metadata.generation``, so the bridge holds it with
the finalizer ``alnair.centaurus.io/training-job``, publishes ``JobCommand{submit}`` (request
id ``cr.<uid>.<generation>``, the message id ``job:<request id>``: a redelivered event or a
second bridge is stored once) and records the generation as ``status.observedGeneration``.
The spec is immutable (the CRD refuses a change), so an object is one job.

Deleting it publishes ``JobCommand{delete}`` (``cr.<uid>.delete``) and keeps the object,
held by the finalizer, until the job's state is terminal (Deleted once its workers stopped;
a finished job at once): a TrainingJob created again under the name cannot meet the old
job's last states, and ``kubectl delete`` returns when the workers are gone. An object that
disappears anyway (its finalizer removed by hand) is deleted from the controller too.

The job's states (``alnair.job.<name>.state``) become the object's status (``_training_job_
status``) through the status subresource, with the object's resourceVersion as precondition:
a state older than the one written (``stateGeneration``) is dropped, as are states of another
job of the name (another spec, or observed before the object existed). Refusals come back
as the controller's error events on the job's command subject: an object of that name that
has heard no state of its job yet gets ``phase: Failed``, reason ``SubmitRefused`` and the
controller's message — only in the namespace the event's ``object`` names
(``namespace/name``); an event without one (an older controller) reaches each namespace's
object of that name that waits for its first state.

A change of phase or reason written, and a refusal, is recorded as an Event on the object
too (``st.event``), before the status: the Event is named after the object's uid and the
state's generation, so a write that conflicts and is redelivered records it once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s

from alnair.v1 import job_pb2, platform_pb2
from alnair_common import Bus, PermanentError, TemporaryError, get_logger, subjects

from . import _training_job_status as st
from ._custom_objects import CustomObjects
from ._kube_errors import api_call
from ._kube_events import record_event
from ._training_job_spec import GROUP, KIND, PLURAL, VERSION, job_key, job_spec, same_job
from ._watch import Changed, Synced

FINALIZER = f"{GROUP}/training-job"
# The controller's clock (observed_at) against the apiserver's (creationTimestamp).
CLOCK_SKEW = timedelta(seconds=2)
log = get_logger("alnair.kube-bridge.trainingjobs")
Obj = dict[str, Any]


class TrainingJobs:
    def __init__(self, bus: Bus, api_client: k8s.ApiClient, namespace: str = "",
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.bus = bus
        self.objects = CustomObjects(api_client, GROUP, VERSION, PLURAL, KIND, namespace)
        self.core = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.clock = clock

    # -- objects → commands -------------------------------------------------------------------

    async def handle(self, item: Synced | Changed) -> None:
        for obj in item.items if isinstance(item, Synced) else [item.obj]:
            try:
                if isinstance(item, Changed) and item.type == "DELETED":
                    if (obj.get("status") or {}).get("reason") != st.SUBMIT_REFUSED:
                        await self._delete(obj)
                else:
                    await self.reconcile(obj)
            except PermanentError as e:
                # Nothing is submitted before the finalizer holds the object, so skipping is
                # safe; its next event tries again. Temporary failures are retried (lanes).
                log.error("training job not handled", job="/".join(job_key(obj)), error=str(e))

    async def reconcile(self, obj: Obj) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        held = FINALIZER in (meta.get("finalizers") or [])
        observed = int(status.get("observedGeneration") or 0)
        if meta.get("deletionTimestamp"):  # (which bumps metadata.generation)
            if not held:
                return
            phase = status.get("phase")
            if status.get("reason") != st.SUBMIT_REFUSED and phase not in ("Deleting", "Deleted"):
                await self._delete(obj)
            if phase in st.TERMINAL or not observed:  # nothing left to wait for
                await asyncio.to_thread(self._release, obj)
            return
        if observed >= _generation(obj):
            return
        if not held:  # first the finalizer: a job is never submitted that a delete could miss
            obj = await asyncio.to_thread(self.objects.hold, obj, FINALIZER)
            if obj is None:
                return
        try:
            spec = job_spec(obj)
        except PermanentError as e:  # only an object the CRD's schema did not check
            log.warning("training job refused", error=str(e))
            await asyncio.to_thread(self._write, obj, st.refused(status, str(e), _generation(obj), self.clock()))
            return
        namespace, name = job_key(obj)
        request = f"cr.{meta['uid']}.{_generation(obj)}"
        await self._send(job_pb2.JobCommand(name=name, namespace=namespace, submit=spec, request_id=request))
        await asyncio.to_thread(self._write, obj, {"observedGeneration": _generation(obj)})
        log.info("training job submitted", job=f"{namespace}/{name}", request_id=request)

    async def _delete(self, obj: Obj) -> None:
        namespace, name = job_key(obj)
        await self._send(job_pb2.JobCommand(name=name, namespace=namespace, delete=True,
                                            request_id=f"cr.{obj['metadata']['uid']}.delete"))
        log.info("training job deleted", job=f"{namespace}/{name}")

    async def _send(self, command: job_pb2.JobCommand) -> None:
        await self.bus.publish(subjects.job_command(command.name), command,
                               msg_id=f"job:{command.request_id}")

    # -- states and refusals → status ---------------------------------------------------------

    async def on_state(self, _subject: str, state: job_pb2.JobState) -> None:
        namespace, name = state.spec.namespace or "default", state.spec.name
        if not name or (self.namespace and namespace != self.namespace):
            return
        await asyncio.to_thread(self._relay_state, namespace, name, state)

    def _relay_state(self, namespace: str, name: str, state: job_pb2.JobState) -> None:
        obj = self.objects.get(namespace, name)
        if obj is None:
            return  # a job submitted otherwise (alnair job submit), or its object is gone
        observed = st.stamp(state.observed_at)
        created = st.parse_time(obj["metadata"].get("creationTimestamp"))
        if observed and created and observed < created - CLOCK_SKEW:
            return  # an earlier job of the same name
        try:
            ours = same_job(job_spec(obj), state.spec)
        except PermanentError:
            ours = False
        if not ours:
            log.info("state of another job of the name not written", job=f"{namespace}/{name}",
                     generation=state.generation)
            return
        status = st.from_state(obj.get("status") or {}, state, _generation(obj))
        if status is not None:
            self._tell(obj, status, f"state.{state.generation}", observed or self.clock())
            self._write(obj, status, conflict_is_temporary=True)

    async def on_error(self, _subject: str, event: platform_pb2.ErrorEvent) -> None:
        head, _, token = event.subject.rpartition(".")
        if head != "alnair.cmd.job" or not token:
            return
        await asyncio.to_thread(self._relay_refusal, subjects.name_of(token), event)

    def _relay_refusal(self, name: str, event: platform_pb2.ErrorEvent) -> None:
        when = st.stamp(event.observed_at) or self.clock()
        namespace, slash, _ = event.object.partition("/")
        for obj in self.objects.named(name):
            meta, status = obj["metadata"], obj.get("status") or {}
            if slash and meta["namespace"] != namespace:
                continue  # the refusal of another namespace's job of the name
            created = st.parse_time(meta.get("creationTimestamp"))
            if (FINALIZER not in (meta.get("finalizers") or []) or meta.get("deletionTimestamp")
                    or status.get("stateGeneration") or (created and when < created - CLOCK_SKEW)
                    or status.get("message") == event.message):
                continue  # not submitted yet, going, heard from its job, or told already
            if int(status.get("observedGeneration") or 0) < _generation(obj):
                # Held, maybe submitted a moment ago: the refusal can overtake the record.
                raise TemporaryError(f"TrainingJob {meta['namespace']}/{name} is being submitted",
                                     retry_after=0.5)
            log.info("training job refused by the controller", job=f"{meta['namespace']}/{name}",
                     error=event.message)
            refused = st.refused(status, event.message, _generation(obj), when)
            self._tell(obj, refused, f"refused.{_generation(obj)}", when)
            self._write(obj, refused, conflict_is_temporary=True)

    # -- API calls ----------------------------------------------------------------------------

    def _release(self, obj: Obj) -> None:
        self.objects.release(obj, FINALIZER)
        log.info("training job released", job=f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")

    def _tell(self, obj: Obj, status: Obj, what: str, when: datetime) -> None:
        """The Event for a status about to be written, if it says something new; a temporary
        failure is the caller's to retry (redelivery), a refusal only logged."""
        said = st.event(obj.get("status") or {}, status)
        if said is None:
            return
        kind, reason, message = said
        meta = obj["metadata"]
        involved = k8s.V1ObjectReference(api_version=f"{GROUP}/{VERSION}", kind=KIND, name=meta["name"],
                                         namespace=meta["namespace"], uid=meta["uid"])
        try:
            api_call(f"record event on TrainingJob {meta['namespace']}/{meta['name']}", lambda: record_event(
                self.core, involved, type=kind, reason=reason, message=message,
                key=f"trainingjob.{meta['uid']}.{what}", when=when))
        except PermanentError as e:  # (no right to create Events): the status still says it
            log.warning("training job event not recorded", job=f"{meta['namespace']}/{meta['name']}",
                        reason=reason, error=str(e))

    def _write(self, obj: Obj, status: Obj, *, conflict_is_temporary: bool = False) -> None:
        """A conflict is retried by the caller's redelivery (states, refusals) or left to the
        object's next watch event (its own steps)."""
        self.objects.write_status(obj, status, conflict_is_temporary=conflict_is_temporary)


def _generation(obj: Obj) -> int:
    return int(obj["metadata"].get("generation") or 1)
