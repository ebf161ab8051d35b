"""TrainingJob objects served by kube-bridge against the real apiserver and nats-server, with
the bridge holding only its RBAC rights: the CRD of the bundle installed; an object created →
one JobCommand submit with its spec (the job the controller reads from it is the one it reads
from the same YAML file); bad specs, bad names and spec changes refused by the apiserver with
the schema's messages; the job's states → the object's status (phase, world size, goodput,
conditions, printer columns), an older state or another job's state not written; deleting →
one delete command, the object kept until the job is Deleted; a refusal by the controller →
the status; redelivered events and a restarted bridge send nothing twice; the job's objects
owned by the TrainingJob; and the real elastic-job controller in-process: created → Pending
on the object, a name clash refused, deleted → gone."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ej_support import running_controller
from google.protobuf.timestamp_pb2 import Timestamp
from kb_support import stream_messages
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

import alnair_elastic_job as ej
from alnair.v1 import common_pb2, job_pb2, platform_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_kube_bridge import Changed
from alnair_kube_bridge._job_workers import JOBS_ROLE, job_selector
from alnair_kube_bridge._training_job_spec import job_spec
from alnair_kube_bridge._training_job_status import event, from_state
from alnair_kube_bridge._training_jobs import FINALIZER, TrainingJobs

J = job_pb2
GROUP, VERSION, PLURAL = "alnair.centaurus.io", "v1", "trainingjobs"
IMAGE = "ghcr.io/example/train:1"
SPEC = {"image": IMAGE, "command": ["python", "train.py"], "minReplicas": 2, "maxReplicas": 4,
        "worker": {"gpuMemoryGiB": 8, "gpuComputePercent": 30}}


class Jobs:
    """The test's side: TrainingJob objects (as kubectl makes them) and the bus."""

    def __init__(self, kube: KubeNamespace, bus: Bus) -> None:
        self.kube, self.bus, self.ns = kube, bus, kube.namespace
        self.api = k8s.CustomObjectsApi(kube.api_client)

    def create(self, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
                "metadata": {"name": name}, "spec": copy.deepcopy(spec or SPEC)}
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    async def commands(self, name: str) -> list[J.JobCommand]:
        found = await stream_messages(self.bus, "COMMANDS", subjects.job_command(name), J.JobCommand)
        return [c for c in found if c.namespace == self.ns]

    async def wait_commands(self, name: str, count: int) -> list[J.JobCommand]:
        async def probe() -> tuple[list[J.JobCommand]] | None:
            found = await self.commands(name)
            return (found,) if len(found) >= count else None
        return (await wait_for(probe, timeout=20, what=f"{count} commands for {name}"))[0]

    async def wait_status(self, name: str, check: Callable[[dict[str, Any]], bool],
                          what: str) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            obj = self.get(name)
            return obj if obj is not None and check(obj.get("status") or {}) else None
        return await wait_for(probe, timeout=20, what=what)

    async def wait_gone(self, name: str) -> None:
        async def probe() -> bool:
            return self.get(name) is None
        await wait_for(probe, timeout=40, what=f"TrainingJob {name} gone")

    async def state(self, spec: J.JobSpec, generation: int, phase: int, *, reason: str = "",
                    replicas: int = 0, target: int = 0, goodput: float = 0.0) -> None:
        now = Timestamp()
        now.GetCurrentTime()
        state = J.JobState(spec=spec, generation=generation, phase=phase, reason=reason,
                           message=f"{reason or 'state'} {generation}", replicas=replicas,
                           target_replicas=target, restarts=1, goodput_ratio=goodput,
                           observed_at=now, entered_at=now,
                           previous_phase=J.JOB_PHASE_UNSPECIFIED if generation == 1 else J.JOB_PHASE_PENDING)
        await self.bus.publish(subjects.job_state(spec.name), state,
                               msg_id=f"{spec.namespace}.{spec.name}.{generation}.{uuid.uuid4().hex}")

    async def settled(self, durable: str, stream: str = "JOBS") -> None:
        async def probe() -> bool:
            info = await self.bus.js.consumer_info(stream, durable)
            return info.num_pending == 0 and info.num_ack_pending == 0
        await wait_for(probe, timeout=20, what=f"{durable} settled")


@pytest.fixture
def jobs(kube: KubeNamespace, bus: Bus) -> Jobs:
    return Jobs(kube, bus)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in status.get("conditions") or []}


def submitted(status: dict[str, Any]) -> bool:
    return status.get("observedGeneration") == 1


# -- the spec ----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [
    SPEC,
    {**SPEC, "maxReplicas": None, "launcher": "torch", "worker": {"gpus": 2}, "image": None},
    {**SPEC, "checkpoint": "/ckpt/x", "restartPolicy": {"backoffSeconds": 400},
     "deadlines": {"schedulingTimeoutSeconds": 30, "activeDeadlineSeconds": 3600}},
    {**SPEC, "restartPolicy": {"maxRestarts": 0, "backoffSeconds": 0, "maxBackoffSeconds": 0}},
    {**SPEC, "restartPolicy": {}},
])
def test_the_controller_reads_the_same_job_from_the_bridges_jobspec_as_from_the_file(spec) -> None:
    spec = {k: v for k, v in spec.items() if v is not None}
    doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
           "metadata": {"name": "resnet", "namespace": "team-a"}, "spec": spec}
    assert ej.from_proto(job_spec(doc)) == ej.from_mapping(doc)


def test_conditions_move_only_when_their_status_flips() -> None:
    def state(generation: int, phase: int, reason: str, second: int) -> J.JobState:
        at = Timestamp(seconds=1_800_000_000 + second)
        return J.JobState(generation=generation, phase=phase, reason=reason, message=reason,
                          observed_at=at, entered_at=at,
                          previous_phase=J.JOB_PHASE_PENDING if generation > 1 else J.JOB_PHASE_UNSPECIFIED)

    def merged(status: dict[str, Any], new: dict[str, Any] | None) -> dict[str, Any]:
        assert new is not None
        return {**status, **new}  # what the merge patch does

    def times(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
        return {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"][17:19]) for c in status["conditions"]}

    pending = merged({}, from_state({}, state(1, J.JOB_PHASE_PENDING, "WaitingForCapacity", 0), 1))
    gang = merged(pending, from_state(pending, state(2, J.JOB_PHASE_SCHEDULING, "WaitingForGang", 5), 1))
    assert times(gang)["Scheduling"] == ("True", "WaitingForGang", "00"), "True since Pending (:00)"
    assert times(gang)["Running"] == ("False", "WaitingForCapacity", "00"), "an unchanged False stays"
    running = merged(gang, from_state(gang, state(3, J.JOB_PHASE_RUNNING, "WorldFormed", 9), 1))
    assert times(running)["Scheduling"] == ("False", "WorldFormed", "09")
    assert times(running)["Running"] == ("True", "WorldFormed", "09")
    assert running["startTime"] == pending["startTime"] == "2027-01-15T08:00:00Z"
    assert from_state(running, state(2, J.JOB_PHASE_SCHEDULING, "WaitingForGang", 5), 1) is None
    deleting = merged(running, from_state(running, state(4, J.JOB_PHASE_DELETING, "Deleting", 12), 2))
    assert {c: v[0] for c, v in times(deleting).items()} == dict.fromkeys(times(deleting), "False")
    assert deleting["observedGeneration"] == 2


def test_an_event_tells_a_new_phase_or_reason_warning_when_a_user_must_look() -> None:
    pending = {"phase": "Pending", "reason": "WaitingForCapacity", "message": "needs 2 cards"}
    assert event({}, pending) == ("Normal", "WaitingForCapacity", "Pending: needs 2 cards")
    assert event(pending, {**pending, "message": "needs 1 card"}) is None, "same phase and reason"
    running = {"phase": "Running", "reason": "WorldFormed", "message": "", "replicas": 2}
    assert event(pending, running) == ("Normal", "WorldFormed", "Running")
    assert event(running, {**running, "replicas": 3, "goodput": 0.9}) is None, "status, not news"
    assert event(pending, {**pending, "reason": "Unschedulable", "message": "no node has 4 cards"}) == (
        "Warning", "Unschedulable", "Pending: no node has 4 cards")
    assert event(running, {"phase": "Recovering", "reason": "WorkerFailed", "message": "w-1 exited 1"})[0] == "Warning"
    assert event(running, {"phase": "Failed", "reason": "", "message": ""}) == ("Warning", "Failed", "Failed")
    assert event(running, {"phase": "Pending", "reason": "Preempted", "message": "grant fell"})[0] == "Warning"
    assert event(running, {"phase": "Rescaling", "reason": "ScalingUp", "message": "2 → 3"})[0] == "Normal"


def events_of(kube: KubeNamespace, uid: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events recorded on the object ``uid``, in the order they
    were created (their resourceVersions: etcd's revisions)."""
    found = kube.core.list_namespaced_event(kube.namespace, field_selector=f"involvedObject.uid={uid}").items
    return [(e.type, e.reason, e.message) for e in sorted(found, key=lambda e: int(e.metadata.resource_version))]


def test_bad_specs_names_and_spec_changes_are_refused_by_the_apiserver(jobs: Jobs) -> None:
    cases = [
        ("min-over-max", {**SPEC, "minReplicas": 5}, "set minReplicas <= maxReplicas"),
        ("mpi", {**SPEC, "launcher": "mpi"}, "unknown launcher"),
        ("zero", {**SPEC, "minReplicas": 0}, "should be greater than or equal to 1"),
        ("a.b", SPEC, "metadata.name must be a DNS-1123 label"),
    ]
    for name, spec, says in cases:
        with pytest.raises(ApiException) as refused:
            jobs.create(name, spec)
        assert refused.value.status == 422, refused.value.body
        assert says in json.loads(refused.value.body)["message"], (name, refused.value.body)
    jobs.create("resnet")
    with pytest.raises(ApiException) as changed:
        jobs.api.patch_namespaced_custom_object(GROUP, VERSION, jobs.ns, PLURAL, "resnet",
                                                {"spec": {"maxReplicas": 8}})
    assert changed.value.status == 422
    assert "spec is immutable" in json.loads(changed.value.body)["message"]
    # Labels and annotations may change (the spec stays as it was).
    jobs.api.patch_namespaced_custom_object(GROUP, VERSION, jobs.ns, PLURAL, "resnet",
                                            {"metadata": {"labels": {"team": "a"}}})


# -- the bridge --------------------------------------------------------------------------------


async def test_a_trainingjob_is_submitted_once_and_its_states_become_its_status(
        jobs: Jobs, kube: KubeNamespace, bridge_kubeconfig: Path, start_bridge) -> None:
    bridge = await start_bridge(bridge_kubeconfig)
    created = jobs.create("resnet")
    [submit] = await jobs.wait_commands("resnet", 1)
    uid = created["metadata"]["uid"]
    assert submit.WhichOneof("action") == "submit" and submit.request_id == f"cr.{uid}.1"
    assert (submit.name, submit.namespace) == ("resnet", jobs.ns)
    doc = {**created, "metadata": {"name": "resnet", "namespace": jobs.ns}}
    assert ej.from_proto(submit.submit) == ej.from_mapping(doc)
    held = await jobs.wait_status("resnet", submitted, "observedGeneration 1")
    assert held["metadata"]["finalizers"] == [FINALIZER]

    # The job's states: the newest is written, an older one and another job's are not.
    spec = submit.submit
    await jobs.state(spec, 1, J.JOB_PHASE_PENDING, reason="WaitingForCapacity")
    pending = await jobs.wait_status("resnet", lambda s: s.get("phase") == "Pending", "Pending")
    assert conditions(pending["status"])["Scheduling"] == ("True", "WaitingForCapacity")
    await jobs.state(spec, 4, J.JOB_PHASE_RUNNING, reason="WorldFormed", replicas=3, target=3, goodput=0.875)
    running = await jobs.wait_status("resnet", lambda s: s.get("phase") == "Running", "Running")
    status = running["status"]
    assert (status["replicas"], status["targetReplicas"], status["restarts"], status["goodput"]) == (3, 3, 1, 0.875)
    assert (status["reason"], status["message"], status["stateGeneration"]) == ("WorldFormed", "WorldFormed 4", 4)
    assert conditions(status) == {"Scheduling": ("False", "WorldFormed"), "Running": ("True", "WorldFormed"),
                                  "Succeeded": ("False", "WaitingForCapacity"),
                                  "Failed": ("False", "WaitingForCapacity")}
    assert status["startTime"] == pending["status"]["startTime"] and status["lastTransitionTime"]
    await jobs.state(spec, 3, J.JOB_PHASE_SCHEDULING, reason="WaitingForGang")
    other = J.JobSpec()
    other.CopyFrom(spec)
    other.image = "someone/else:2"
    await jobs.state(other, 9, J.JOB_PHASE_FAILED, reason="NotThisOne")
    await jobs.settled("kube-bridge-job-states")
    assert jobs.get("resnet")["status"] == status
    table = kube.kubectl("get", "trainingjobs")
    assert table.split("\n")[0].split() == ["NAME", "PHASE", "REPLICAS", "RESTARTS", "GOODPUT", "AGE"]
    assert table.split("\n")[1].split()[:5] == ["resnet", "Running", "3", "1", "0.875"]

    # A redelivered watch event sends nothing twice: the stale object's finalizer patch
    # conflicts, and an object caught between its submit and its record is deduplicated.
    replay = TrainingJobs(jobs.bus, kube.api_client, jobs.ns)
    await replay.handle(Changed("trainingjobs", "ADDED", created))
    caught = copy.deepcopy(held)
    caught.pop("status")
    await replay.reconcile(caught)
    # A restarted bridge lists the object again and sends nothing either.
    await bridge.stop()
    await start_bridge(bridge_kubeconfig)
    assert [c.request_id for c in await jobs.commands("resnet")] == [f"cr.{uid}.1"]

    # Each new phase or reason was told as an Event on the object, once; the older state and
    # the other job's were not. A failure is a Warning, and kubectl describe lists them.
    assert events_of(kube, uid) == [("Normal", "WaitingForCapacity", "Pending: WaitingForCapacity 1"),
                                    ("Normal", "WorldFormed", "Running: WorldFormed 4")]
    await jobs.state(spec, 6, J.JOB_PHASE_FAILED, reason="RestartsExhausted")
    await jobs.wait_status("resnet", lambda s: s.get("phase") == "Failed", "Failed")
    assert events_of(kube, uid)[2:] == [("Warning", "RestartsExhausted", "Failed: RestartsExhausted 6")]
    described = kube.kubectl("describe", "trainingjob", "resnet")
    assert "Events:" in described and "RestartsExhausted" in described and "WorldFormed" in described


async def test_deleting_sends_one_delete_and_keeps_the_object_until_the_job_is_deleted(
        jobs: Jobs, bridge_kubeconfig: Path, start_bridge) -> None:
    await start_bridge(bridge_kubeconfig)
    running, done = jobs.create("resnet"), jobs.create("done")
    [submit] = await jobs.wait_commands("resnet", 1)
    [finished] = await jobs.wait_commands("done", 1)
    await jobs.state(submit.submit, 2, J.JOB_PHASE_RUNNING, replicas=2, target=2)
    await jobs.state(finished.submit, 5, J.JOB_PHASE_SUCCEEDED, reason="Completed")
    await jobs.wait_status("resnet", lambda s: s.get("phase") == "Running", "Running")
    await jobs.wait_status("done", lambda s: s.get("phase") == "Succeeded", "Succeeded")

    jobs.delete("resnet")
    jobs.delete("done")
    await jobs.wait_gone("done")  # a finished job has no workers to wait for
    commands = await jobs.wait_commands("resnet", 2)
    assert [c.WhichOneof("action") for c in commands] == ["submit", "delete"]
    assert commands[1].request_id == f"cr.{running['metadata']['uid']}.delete"
    assert jobs.get("resnet")["metadata"]["deletionTimestamp"], "held until its workers stopped"
    await jobs.state(submit.submit, 3, J.JOB_PHASE_DELETING, reason="Deleting")
    await jobs.wait_status("resnet", lambda s: s.get("phase") == "Deleting", "Deleting")
    assert jobs.get("resnet") is not None
    await jobs.state(submit.submit, 4, J.JOB_PHASE_DELETED, reason="Deleted")
    await jobs.wait_gone("resnet")
    done_commands = await jobs.commands("done")
    assert [c.WhichOneof("action") for c in done_commands] == ["submit", "delete"]
    assert done_commands[1].request_id == f"cr.{done['metadata']['uid']}.delete"
    assert len(await jobs.commands("resnet")) == 2, "the DELETED event's delete is deduplicated"


async def test_a_refusal_by_the_controller_is_written_on_the_status(
        jobs: Jobs, kube: KubeNamespace, bridge_kubeconfig: Path, start_bridge) -> None:
    await start_bridge(bridge_kubeconfig)
    jobs.create("resnet")
    await jobs.wait_commands("resnet", 1)
    await jobs.wait_status("resnet", submitted, "submitted")
    now = Timestamp()
    now.GetCurrentTime()
    later = Timestamp(seconds=now.seconds + 2)
    # First the refusal of another namespace's job of the name: not this object's (if it were
    # written, the Failed condition would keep its time, the earlier one, through the next).
    await jobs.bus.publish(subjects.error("elastic-job"), platform_pb2.ErrorEvent(
        service="elastic-job", code="invalid-request", message="spec.minReplicas: must be >= 1",
        subject=subjects.job_command("resnet"), object="elsewhere/resnet", observed_at=now, permanent=True))
    refusal = "metadata.name: job x/resnet exists and is Running; delete it first or choose another name"
    await jobs.bus.publish(subjects.error("elastic-job"), platform_pb2.ErrorEvent(
        service="elastic-job", code="invalid-request", message=refusal,
        subject=subjects.job_command("resnet"), object=f"{jobs.ns}/resnet", observed_at=later, permanent=True))
    refused = await jobs.wait_status("resnet", lambda s: s.get("reason") == "SubmitRefused", "refused")
    assert (refused["status"]["phase"], refused["status"]["message"]) == ("Failed", refusal)
    assert events_of(kube, refused["metadata"]["uid"]) == [("Warning", "SubmitRefused", f"Failed: {refusal}")]
    assert conditions(refused["status"])["Failed"] == ("True", "SubmitRefused")
    [failed] = [c for c in refused["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["lastTransitionTime"] == later.ToDatetime().strftime("%Y-%m-%dT%H:%M:%SZ"), \
        "the other namespace's refusal was written on this object first"
    # Deleting it deletes nobody's job (the name is another job's) and does not wait.
    jobs.delete("resnet")
    await jobs.wait_gone("resnet")
    assert [c.WhichOneof("action") for c in await jobs.commands("resnet")] == ["submit"]


@pytest.fixture
def bind_jobs_role(kube: KubeNamespace, bridge_kubeconfig: Path) -> Iterator[None]:
    """The training-jobs ClusterRole bound in the test namespace (as an operator binds it)."""
    rbac = k8s.RbacAuthorizationV1Api(kube.api_client)
    role = f"{JOBS_ROLE}-{kube.namespace}"
    rbac.create_namespaced_role_binding(kube.namespace, {
        "metadata": {"name": "alnair-training-jobs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "kube-bridge", "namespace": kube.namespace}]})
    try:
        yield
    finally:
        rbac.delete_cluster_role(role)


async def test_the_jobs_objects_are_owned_by_its_trainingjob(
        jobs: Jobs, kube: KubeNamespace, bridge_kubeconfig: Path, bind_jobs_role, start_bridge) -> None:
    await start_bridge(bridge_kubeconfig)
    created = jobs.create("resnet")
    [submit] = await jobs.wait_commands("resnet", 1)
    plan = J.WorkerPlan(spec=submit.submit, generation=2, phase=J.JOB_PHASE_SCHEDULING, target=2,
                        gang_min=2, rendezvous_id=f"{jobs.ns}.resnet.1")
    await jobs.bus.publish(subjects.job_workers("resnet"), plan)

    async def pods() -> list[k8s.V1Pod]:
        return kube.core.list_namespaced_pod(jobs.ns, label_selector=job_selector("resnet", jobs.ns)).items
    found = await wait_for(lambda: _count(pods, 2), timeout=20, what="2 worker pods")
    service = kube.core.read_namespaced_service("resnet-workers", jobs.ns)
    uid = created["metadata"]["uid"]
    [ref] = service.metadata.owner_references
    assert (ref.api_version, ref.kind, ref.name, ref.uid, ref.controller) == (
        f"{GROUP}/{VERSION}", "TrainingJob", "resnet", uid, True)
    for pod in found:
        anchor, job = pod.metadata.owner_references
        assert (anchor.kind, anchor.uid, anchor.controller) == ("Service", service.metadata.uid, True)
        assert (job.kind, job.uid, job.controller) == ("TrainingJob", uid, False)


async def _count(probe: Callable[[], Any], count: int) -> Any:
    found = await probe()
    return found if len(found) == count else None


# -- with the controller -----------------------------------------------------------------------


@pytest.fixture
async def controller(nats_server: NatsServer) -> AsyncIterator[ej.ElasticJobService]:
    async with running_controller(nats_server.url, []) as service:  # no GPUs: jobs stay Pending
        yield service


async def test_with_the_controller_created_is_pending_a_clash_is_refused_deleted_is_gone(
        jobs: Jobs, bridge_kubeconfig: Path, start_bridge, controller) -> None:
    await start_bridge(bridge_kubeconfig)
    jobs.create("resnet")
    pending = await jobs.wait_status("resnet", lambda s: s.get("phase") == "Pending", "Pending from the controller")
    assert pending["status"]["stateGeneration"] == 1 and pending["status"]["targetReplicas"] == 0
    assert conditions(pending["status"])["Scheduling"][0] == "True"

    # A job of the name submitted otherwise, with another spec: the object is refused.
    clash = J.JobSpec(name="clash", namespace=jobs.ns, min_replicas=1, max_replicas=1,
                      command=["python", "other.py"], replica_request=common_pb2.GpuRequest(
                          memory_gib=4, compute_percent=10))
    await jobs.bus.publish(subjects.job_command("clash"), J.JobCommand(
        name="clash", namespace=jobs.ns, submit=clash, request_id="cli-1"), msg_id="job:cli-1")
    await wait_for(lambda: _async(controller.controller.jobs.get(f"{jobs.ns}/clash")), timeout=10,
                   what="the CLI's job known")
    jobs.create("clash")
    refused = await jobs.wait_status("clash", lambda s: s.get("reason") == "SubmitRefused", "refused")
    assert "exists and is Pending" in refused["status"]["message"]

    jobs.delete("resnet")
    await jobs.wait_gone("resnet")
    assert f"{jobs.ns}/resnet" not in controller.controller.jobs or \
        controller.controller.jobs[f"{jobs.ns}/resnet"].status.phase is ej.Phase.DELETED
    jobs.delete("clash")
    await jobs.wait_gone("clash")
    assert controller.controller.jobs[f"{jobs.ns}/clash"].status.phase is ej.Phase.PENDING, \
        "deleting the refused object left the other job alone"


async def _async(value: Any) -> Any:
    return value
