"""Training-job workers in Kubernetes mode: the elastic-job controller's WorkerPlans carried out.

For each plan (``alnair.cmd.workers.<name>``) of a job in the namespaces this bridge acts in:
newer generations only. The generation carried out is an annotation of the job's workers
Service (``_job_objects``), so it survives a restart of the bridge, and it lives exactly as
long as the job's objects do: a job that ended takes it along, so the same name submitted
again (whose plans count from 1 again) is not mistaken for an old plan. Then, by the shared
rule (``alnair_lifecycle.plan_changes``): the job's live worker pods are counted by their
labels (pending or running, also while being deleted: they are still there), the pods in
``stop`` and those of an earlier gang are deleted (their uid as precondition), and the
missing ones created, after their
gang's rendezvous pod and Service and, for a gang placed all-or-nothing, its PodGroup. Other
gangs' objects go (a new gang meets in a new rendezvous), all of them at target 0. A plan
whose job already has a newer plan waiting in the stream only stops
(:func:`alnair_lifecycle.newer_plan_waiting`): its pods would be deleted or counted by the next.

A job that ended (Succeeded, Failed: target 0) keeps its finished pods for their logs, owned
only by its TrainingJob object if it has one (deleting that takes them); a deleted job's pods
go too. A refused plan (no name, no image, a request
no card can hold, a namespace where the bridge may not create pods) is terminated with the
reason as an ErrorEvent; a temporary failure is retried, and a plan half carried out when a
call failed is finished by its redelivery: the live pods are counted again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from alnair.v1 import job_pb2
from alnair_common import Bus, PermanentError, get_logger
from alnair_lifecycle import JOB_LABEL, JOB_NAMESPACE_LABEL, RENDEZVOUS_LABEL, newer_plan_waiting, plan_changes

from . import _job_objects as o
from ._kube_errors import MERGE_PATCH, KubeApiError, api_call, api_json
from ._training_job_spec import API_VERSION as TJ_API_VERSION
from ._training_job_spec import GROUP as TJ_GROUP
from ._training_job_spec import KIND as TJ_KIND
from ._training_job_spec import PLURAL as TJ_PLURAL
from ._training_job_spec import VERSION as TJ_VERSION
from ._training_job_spec import job_spec, same_job

log = get_logger("alnair.kube-bridge.jobs")
Obj = dict[str, Any]
JOBS_ROLE = "alnair-kube-bridge-training-jobs"
ENDED = (job_pb2.JOB_PHASE_SUCCEEDED, job_pb2.JOB_PHASE_FAILED, job_pb2.JOB_PHASE_DELETED)
_LIVE_PHASES = ("Pending", "Running", "Unknown")
_OWN_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_SERVICE_ACCOUNT = re.compile(r'"system:serviceaccount:([a-z0-9.-]+):([a-z0-9.-]+)"')


def own_namespace() -> str:
    """The bridge's own namespace (its ServiceAccount's), for the RoleBinding hint."""
    try:
        return _OWN_NAMESPACE.read_text().strip() or "alnair-system"
    except OSError:
        return "alnair-system"


def binding_command(namespace: str, refusal: str = "") -> str:
    """The command that lets kube-bridge run training jobs in ``namespace``.

    The ServiceAccount is the one the apiserver names in its refusal (``User
    "system:serviceaccount:<ns>:<name>"``), so the command is exact wherever the bridge runs
    and whatever its account is called; without one, this pod's account is assumed."""
    found = _SERVICE_ACCOUNT.search(refusal)
    account = f"{found[1]}:{found[2]}" if found else f"{own_namespace()}:kube-bridge"
    return (f"kubectl -n {namespace} create rolebinding alnair-training-jobs "
            f"--clusterrole={JOBS_ROLE} --serviceaccount={account}")


def job_selector(name: str, namespace: str) -> str:
    """The label selector of a job's worker pods (``worker_labels``)."""
    return f"{JOB_LABEL}={name},{JOB_NAMESPACE_LABEL}={namespace}"


class JobWorkers:
    def __init__(self, api_client: k8s.ApiClient, *, namespace: str = "",
                 scheduler_name: str = "alnair-scheduler", bus: Bus | None = None) -> None:
        self.bus = bus  # to look ahead for a newer plan (none: every plan carried out in full)
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.scheduler_name = scheduler_name

    async def on_plan(self, _subject: str, plan: job_pb2.WorkerPlan) -> None:
        namespace = plan.spec.namespace or "default"
        if self.namespace and namespace != self.namespace:
            return  # another bridge's namespace
        o.check_plan(plan)
        if plan.target:  # a spec no worker can be made of is refused before the API is asked
            o.check_creatable(plan)
        superseded = bool(plan.target and self.bus and await newer_plan_waiting(self.bus, plan))
        try:
            await asyncio.to_thread(self.apply, plan, namespace, superseded=superseded)
        except KubeApiError as e:
            if e.status != 403:
                raise
            raise KubeApiError(
                f"training job {namespace}/{plan.spec.name} refused: namespace {namespace} does not "
                f"let kube-bridge run training jobs ({e}); bind ClusterRole {JOBS_ROLE} to "
                f"kube-bridge in namespace {namespace}: {binding_command(namespace, str(e))}", 403) from e

    def apply(self, plan: job_pb2.WorkerPlan, namespace: str, *, superseded: bool = False) -> None:
        """Carry ``plan`` out; ``superseded`` (a newer plan of the job waits in the stream):
        its stops only — the newer plan creates what it needs, and records its generation."""
        name, base = plan.spec.name, o.base_name(namespace, plan.spec.name)
        job, anchor_name = f"{namespace}/{name}", o.workers_service_name(base)
        anchor = api_json(f"read Service {namespace}/{anchor_name}", lambda: self.core.read_namespaced_service(
            anchor_name, namespace, _preload_content=False), absent=(404,))
        applied = int(((anchor or {}).get("metadata", {}).get("annotations") or {})
                      .get(o.GENERATION_ANNOTATION) or 0)
        if plan.generation <= applied:
            return  # redelivered, or older than one carried out
        live = self._live_pods(name, namespace)
        changes = plan_changes(plan, live, pending=[u for u, p in live.items()
                                                    if not (p.get("spec") or {}).get("nodeName")],
                               gangs={u: (p["metadata"].get("labels") or {}).get(RENDEZVOUS_LABEL, "")
                                      for u, p in live.items()})
        for uid in changes.stop:
            self._delete_pod(live[uid], namespace)
        if changes.create and superseded:
            log.info("worker plan superseded: newer plan waiting, none created", job=job,
                     generation=plan.generation, stopped=len(changes.stop))
            return
        if changes.create:
            job_object = self._training_job(plan, namespace)
            if anchor is None:
                job_owner = (None if job_object is None else
                             o.owner(job_object, api_version=TJ_API_VERSION, kind=TJ_KIND))
                anchor = api_json(f"create Service {namespace}/{anchor_name}",
                                    lambda: self.core.create_namespaced_service(
                                        namespace, o.workers_service(plan, namespace, base, job_owner),
                                        _preload_content=False))
            assert anchor is not None
            owned_by = o.owner(anchor)
            group = self._ensure_gang(plan, namespace, base, owned_by)
            pod_owner = (None if job_object is None else o.owner(
                job_object, api_version=TJ_API_VERSION, kind=TJ_KIND, controller=False))
            for _ in range(changes.create):
                pod = o.worker_pod(plan, namespace, base, scheduler_name=self.scheduler_name,
                                   owned_by=owned_by, pod_group=group, job_owner=pod_owner)
                api_call(f"create a worker pod of {job}",
                           lambda pod=pod: self.core.create_namespaced_pod(namespace, pod))
        self._remove_gangs(name, namespace, keep=plan.rendezvous_id if plan.target else None)
        if plan.phase in ENDED and not plan.target:
            self._end(plan, namespace, anchor_name, anchor is not None)
        elif anchor is not None:
            patch = {"metadata": {"annotations": {o.GENERATION_ANNOTATION: str(plan.generation)}}}
            api_call(f"annotate Service {namespace}/{anchor_name}", lambda: self.core.patch_namespaced_service(
                anchor_name, namespace, patch, _content_type=MERGE_PATCH))
        log.info("worker plan applied", job=job, generation=plan.generation, target=plan.target,
                 stopped=len(changes.stop), created=changes.create)

    # -- steps --------------------------------------------------------------------------------

    def _training_job(self, plan: job_pb2.WorkerPlan, namespace: str) -> Obj | None:
        """The TrainingJob object this job was submitted as, if it was (``alnair job submit``
        makes none) and the bridge may read it; another job of the name is not it."""
        name = plan.spec.name
        try:
            found = api_json(f"read TrainingJob {namespace}/{name}", lambda: self.custom.get_namespaced_custom_object(
                TJ_GROUP, TJ_VERSION, namespace, TJ_PLURAL, name, _preload_content=False), absent=(403, 404))
            return found if found is not None and same_job(job_spec(found), plan.spec) else None
        except PermanentError as e:
            log.info("no TrainingJob owner for the job's objects", job=f"{namespace}/{name}", error=str(e))
            return None

    def _job_pods(self, name: str, namespace: str) -> list[Obj]:
        found = api_json(f"list the worker pods of {namespace}/{name}", lambda: self.core.list_namespaced_pod(
            namespace, label_selector=job_selector(name, namespace), _preload_content=False))
        return list((found or {}).get("items") or [])

    def _live_pods(self, name: str, namespace: str) -> dict[str, Obj]:
        return {p["metadata"]["uid"]: p for p in self._job_pods(name, namespace)
                if (p.get("status") or {}).get("phase", "Pending") in _LIVE_PHASES}

    def _delete_pod(self, pod: Obj, namespace: str) -> None:
        meta = pod["metadata"]
        log.info("stopping worker", namespace=namespace, pod=meta["name"])
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=meta["uid"]))
        # 404: gone already; 409: the name is another pod's now (this one is gone too).
        api_call(f"delete pod {namespace}/{meta['name']}", lambda: self.core.delete_namespaced_pod(
            meta["name"], namespace, body=options), absent=(404, 409))

    def _ensure_gang(self, plan: job_pb2.WorkerPlan, namespace: str, base: str,
                     owned_by: Obj) -> str | None:
        """The gang's rendezvous pod and Service, and its PodGroup (its name) when the plan
        places the missing workers all-or-nothing on Alnair's scheduler. 409: made for this
        gang by an earlier plan."""
        gang = o.gang_name(base, plan.rendezvous_id)
        api_call(f"create pod {namespace}/{gang}", lambda: self.core.create_namespaced_pod(
            namespace, o.rendezvous_pod(plan, namespace, base, owned_by=owned_by)), absent=(409,))
        api_call(f"create Service {namespace}/{gang}", lambda: self.core.create_namespaced_service(
            namespace, o.rendezvous_service(plan, namespace, base, owned_by=owned_by)), absent=(409,))
        if not plan.gang_min or plan.spec.whole_gpus:  # the default scheduler knows no gangs
            return None
        group_api, version, plural = o.PODGROUP_API
        created = api_call(f"create PodGroup {namespace}/{gang}", lambda: self.custom.create_namespaced_custom_object(
            group_api, version, namespace, plural, o.pod_group(plan, namespace, base, owned_by=owned_by)),
            absent=(409,))
        if created is None:  # the gang's group exists: the same gang asked again, maybe smaller
            api_call(f"patch PodGroup {namespace}/{gang}", lambda: self.custom.patch_namespaced_custom_object(
                group_api, version, namespace, plural, gang, {"spec": {"minMember": plan.gang_min}},
                _content_type=MERGE_PATCH))
        return gang

    def _remove_gangs(self, name: str, namespace: str, *, keep: str | None) -> None:
        """Delete the job's rendezvous pods, Services and PodGroups but those of ``keep``."""
        selector = f"{o.GANG_LABEL}={name}" + (f",{RENDEZVOUS_LABEL}!={keep}" if keep else "")
        group_api, version, plural = o.PODGROUP_API
        kinds: list[tuple[str, Callable[[], Any], Callable[[str], Any]]] = [
            ("pods", lambda: self.core.list_namespaced_pod(namespace, label_selector=selector,
                                                           _preload_content=False),
             lambda n: self.core.delete_namespaced_pod(n, namespace, grace_period_seconds=5)),
            ("services", lambda: self.core.list_namespaced_service(namespace, label_selector=selector,
                                                                   _preload_content=False),
             lambda n: self.core.delete_namespaced_service(n, namespace)),
            ("podgroups", lambda: self.custom.list_namespaced_custom_object(
                group_api, version, namespace, plural, label_selector=selector, _preload_content=False),
             lambda n: self.custom.delete_namespaced_custom_object(group_api, version, namespace, plural, n)),
        ]
        for kind, list_call, delete in kinds:
            found = api_json(f"list the rendezvous {kind} of {namespace}/{name}", list_call) or {}
            for item in found.get("items") or []:
                gone = item["metadata"]["name"]
                log.info("rendezvous object removed", kind=kind, name=gone, namespace=namespace)
                api_call(f"delete {kind} {namespace}/{gone}", lambda d=delete, g=gone: d(g), absent=(404,))

    def _end(self, plan: job_pb2.WorkerPlan, namespace: str, anchor_name: str, has_anchor: bool) -> None:
        """The job ended: its workers Service goes, with its record of the generation. A
        finished job's pods are orphaned (kept for their logs); a deleted job's go too."""
        deleted = plan.phase == job_pb2.JOB_PHASE_DELETED
        if deleted:
            for pod in self._job_pods(plan.spec.name, namespace):
                self._delete_pod(pod, namespace)
        if has_anchor:
            policy = "Background" if deleted else "Orphan"
            api_call(f"delete Service {namespace}/{anchor_name}", lambda: self.core.delete_namespaced_service(
                anchor_name, namespace, propagation_policy=policy), absent=(404,))

    # -- API calls ----------------------------------------------------------------------------
