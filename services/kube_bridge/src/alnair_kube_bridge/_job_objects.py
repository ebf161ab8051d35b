"""The Kubernetes objects of a training job, built from its WorkerPlan (no API calls here).

Per job, in the job's namespace:

* the **workers Service** ``<job>-workers``: headless, selecting the job's worker pods, and
  the pods' ``subdomain``, so that each worker's FQDN (which torchrun reports as its address,
  and rank 0's is every peer's ``MASTER_ADDR``) resolves. It is also the job's anchor: it
  carries the newest plan generation carried out (``ai.centaurus.io/worker-plan-generation``)
  and owns every other object of the job, so deleting it removes them. A job submitted as a
  TrainingJob object has it owned by that object (and the worker pods too, which outlive the
  Service when the job ends), so ``kubectl delete trainingjob`` leaves nothing behind;
* per gang (one per ``rendezvous_id``) ``<job>-gang-<hash>``: the rendezvous pod (the c10d
  host, ``alnair_lifecycle/rendezvous_host.py`` run by the job's image, plus a container that
  prints the rounds it closes, which is how they reach kube-bridge: the pod's log), a Service
  of the same name in front of it (the workers' ``--rdzv-endpoint``) and, when the gang is
  placed all-or-nothing, a PodGroup of the same name. A gang's objects are made anew for
  each gang: the scheduler counts a PodGroup's timeout from its creation and keeps its
  failure for good;
* the worker pods ``<job>-<random>``: the job's image and its command under torchrun, or
  itself for torch-inprocess (``worker_command``, with ``worker_env``), the job's labels
  (``worker_labels``), the GPU request, ``restartPolicy: Never``.

Every bad plan is refused here, before any object exists, with the field to fix.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import alnair_lifecycle
from alnair.v1 import job_pb2
from alnair_common import PermanentError
from alnair_common.annotations import POD_GROUP_LABEL
from alnair_common.annotations import PREFIX as ANNOTATION_PREFIX
from alnair_lifecycle import PROGRESS_ENV, RENDEZVOUS_LABEL, worker_command, worker_env, worker_labels

from ._pods import VGPU_COMPUTE, VGPU_MEMORY

Obj = dict[str, Any]
GENERATION_ANNOTATION = ANNOTATION_PREFIX + "worker-plan-generation"
GANG_LABEL = ANNOTATION_PREFIX + "training-job-gang"  # value: the job's name
MANAGED_BY = {"app.kubernetes.io/managed-by": "alnair-kube-bridge"}
MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())  # a label selector
WHOLE_GPU = "nvidia.com/gpu"
RENDEZVOUS_PORT = 29400
# A job's pods leave a node that stops answering after this long, not Kubernetes' default
# 300 s: survivors of a lost worker wait in the rendezvous until its replacement joins, so
# every second the dead pod is kept is a second of the whole job lost. 30 s rides out a
# kubelet restart or a short network blip. (Nodes deleted outright: _lost_nodes.py.)
NODE_LOSS_TOLERATION_SECONDS = 30
NODE_LOSS_TOLERATIONS = [
    {"key": key, "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": NODE_LOSS_TOLERATION_SECONDS}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
RENDEZVOUS_DIR = "/tmp/rdzv"
HOST_CONTAINER, ROUNDS_CONTAINER = "host", "rounds"
# A worker's training script may write "<step> <seconds>" to $ALNAIR_PROGRESS_FILE (replacing
# it each step); the worker pod's sidecar prints each new content, so the newest step is the
# last line of that sidecar's log, which kube-bridge reads (_job_steps.py).
PROGRESS_CONTAINER, PROGRESS_DIR = "progress", "/alnair/progress"
PROGRESS_FILE = PROGRESS_DIR + "/step"
HOST_SCRIPT = Path(alnair_lifecycle.__file__).with_name("rendezvous_host.py")
PODGROUP_API = ("alnair.centaurus.io", "v1alpha1", "podgroups")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_BASE_LENGTH = 40  # leaves room for "-workers", "-gang-<8>" and a pod's 5-letter suffix (63)

# Prints each line the host appends to rounds.jsonl, once, whole: the log is the rounds.
ROUNDS_FOLLOWER = """
import sys, time
path, done = sys.argv[1], 0
while True:
    try:
        with open(path, "rb") as f:
            f.seek(done)
            chunk = f.read()
    except OSError:
        chunk = b""
    whole = chunk[:chunk.rfind(b"\\n") + 1]
    if whole:
        sys.stdout.buffer.write(whole)
        sys.stdout.flush()
        done += len(whole)
    time.sleep(0.2)
"""


# Prints the progress file each time its content changes (one line: "<step> <seconds>").
PROGRESS_FOLLOWER = """
import sys, time
path, last = sys.argv[1], b""
while True:
    try:
        with open(path, "rb") as f:
            now = f.read().strip()
    except OSError:
        now = b""
    if now and now != last and b"\\n" not in now:
        sys.stdout.buffer.write(now + b"\\n")
        sys.stdout.flush()
        last = now
    time.sleep(0.5)
"""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def base_name(namespace: str, name: str) -> str:
    """A DNS-1035 label for the job's object names: the job's name when it is one of at most
    40 characters, else a cleaned prefix and a hash of ``namespace/name`` (no collisions)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not clean[:1].isalpha():
        clean = f"job-{clean}".rstrip("-")
    if clean == name and len(clean) <= _BASE_LENGTH:
        return clean
    return f"{clean[:_BASE_LENGTH - 9].rstrip('-')}-{_digest(f'{namespace}/{name}')}"


def workers_service_name(base: str) -> str:
    return f"{base}-workers"


def gang_name(base: str, rendezvous_id: str) -> str:
    return f"{base}-gang-{_digest(rendezvous_id)}"


def endpoint(gang: str, namespace: str) -> str:
    return f"{gang}.{namespace}.svc:{RENDEZVOUS_PORT}"


def check_plan(plan: job_pb2.WorkerPlan) -> None:
    """Refuse a plan that no object can be made of (PermanentError naming the field)."""
    spec = plan.spec
    if not spec.name:
        raise PermanentError("worker plan without spec.name; the elastic-job controller always "
                             "sends the job's spec")
    for key, value in worker_labels(plan).items():
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise PermanentError(
                f"training job {spec.namespace or 'default'}/{spec.name}: label {key}={value!r} "
                f"is not a Kubernetes label value ({len(value)} characters; at most 63 letters, "
                "digits, '-', '_' or '.'); choose a shorter job name")


def check_creatable(plan: job_pb2.WorkerPlan) -> None:
    """What creating workers needs beyond :func:`check_plan`: an image, a command, a GPU ask."""
    spec = plan.spec
    job = f"training job {spec.namespace or 'default'}/{spec.name}"
    if not spec.image:
        raise PermanentError(f"{job} has no spec.image: in Kubernetes mode every worker runs the "
                             "job's container image (which must have torchrun on its PATH)")
    if not spec.command:
        raise PermanentError(f"{job} has no spec.command to run under torchrun")
    if not plan.rendezvous_id:
        raise PermanentError(f"{job}: the plan has no rendezvous_id; workers need one to meet")
    gpu_limits(plan)


def gpu_limits(plan: job_pb2.WorkerPlan) -> dict[str, str]:
    """Each worker's limits: Alnair's shares of one card, or whole cards (``nvidia.com/gpu``:
    Alnair's device plugin advertises shares only, so whole cards are the NVIDIA plugin's)."""
    spec = plan.spec
    if spec.whole_gpus:
        return {WHOLE_GPU: str(spec.whole_gpus)}
    memory, compute = spec.replica_request.memory_gib, spec.replica_request.compute_percent
    if memory < 1 or not 1 <= compute <= 100:
        raise PermanentError(
            f"training job {spec.namespace or 'default'}/{spec.name}: each worker asks for "
            f"{memory} GiB and {compute} % of a card; set spec.worker.gpuMemoryGiB >= 1 and "
            "gpuComputePercent 1..100, or gpus: N for whole cards")
    return {VGPU_MEMORY: str(memory), VGPU_COMPUTE: str(compute)}


def owner(obj: Obj, *, api_version: str = "v1", kind: str = "Service",
          controller: bool = True) -> Obj:
    """An ownerReference to ``obj`` (the workers Service, or the job's TrainingJob), as the
    garbage collector reads it. No ``blockOwnerDeletion``: that needs rights on the owner's
    finalizers, and nothing waits for the dependents."""
    meta = obj["metadata"]
    return {"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": meta["uid"],
            "controller": controller}


def workers_service(plan: job_pb2.WorkerPlan, namespace: str, base: str,
                    job_owner: Obj | None = None) -> Obj:
    """``job_owner``: the TrainingJob the job was submitted as, whose deletion (garbage
    collection) then takes the Service and everything it owns."""
    labels = worker_labels(plan)
    selector = {k: v for k, v in labels.items() if k != RENDEZVOUS_LABEL}
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": workers_service_name(base), "namespace": namespace,
                     "labels": {**selector, **MANAGED_BY},
                     **({"ownerReferences": [job_owner]} if job_owner else {})},
        # No ports: the Service is there for the workers' DNS names, not for traffic.
        "spec": {"clusterIP": "None", "selector": selector, "publishNotReadyAddresses": True},
    }


def worker_pod(plan: job_pb2.WorkerPlan, namespace: str, base: str, *, scheduler_name: str,
               owned_by: Obj, pod_group: str | None, job_owner: Obj | None = None) -> Obj:
    """``job_owner`` (the TrainingJob, not the controller) stays an owner when the job ends
    and its workers Service is deleted orphaning the finished pods: deleting the TrainingJob
    then takes them too."""
    spec = plan.spec
    labels = worker_labels(plan)
    if pod_group:
        labels[POD_GROUP_LABEL] = pod_group
    gang = gang_name(base, plan.rendezvous_id)
    pod_spec: Obj = {
        "restartPolicy": "Never",
        "subdomain": workers_service_name(base),
        "enableServiceLinks": False,
        "tolerations": NODE_LOSS_TOLERATIONS,
        "containers": [{
            "name": "worker", "image": spec.image,
            "command": worker_command(plan, endpoint(gang, namespace)),
            "env": [{"name": k, "value": v} for k, v in
                    sorted({**worker_env(plan, endpoint(gang, namespace)), PROGRESS_ENV: PROGRESS_FILE}.items())],
            "resources": {"limits": gpu_limits(plan)},
            "volumeMounts": [{"name": PROGRESS_CONTAINER, "mountPath": PROGRESS_DIR}],
        }],
        # A native sidecar (an init container that keeps running): it ends with the worker,
        # so the pod's phase stays the worker's.
        "initContainers": [{
            "name": PROGRESS_CONTAINER, "image": spec.image, "restartPolicy": "Always",
            "command": ["python3", "-u", "-c", PROGRESS_FOLLOWER, PROGRESS_FILE],
            "volumeMounts": [{"name": PROGRESS_CONTAINER, "mountPath": PROGRESS_DIR}],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
        }],
        "volumes": [{"name": PROGRESS_CONTAINER, "emptyDir": {}}],
    }
    if not spec.whole_gpus:  # whole cards are placed by the default scheduler
        pod_spec["schedulerName"] = scheduler_name
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": f"{base}-", "namespace": namespace,
                     "labels": {**labels, **MANAGED_BY},
                     "ownerReferences": [owned_by, *([job_owner] if job_owner else [])]},
        "spec": pod_spec,
    }


def gang_labels(plan: job_pb2.WorkerPlan) -> dict[str, str]:
    return {GANG_LABEL: plan.spec.name, RENDEZVOUS_LABEL: plan.rendezvous_id, **MANAGED_BY}


def rendezvous_pod(plan: job_pb2.WorkerPlan, namespace: str, base: str, *, owned_by: Obj) -> Obj:
    gang = gang_name(base, plan.rendezvous_id)
    mount = [{"name": "rendezvous", "mountPath": RENDEZVOUS_DIR}]
    host = ["python3", "-c", HOST_SCRIPT.read_text(), "--run-id", plan.rendezvous_id,
            "--dir", RENDEZVOUS_DIR, "--host", "0.0.0.0", "--port", str(RENDEZVOUS_PORT)]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": gang, "namespace": namespace, "labels": gang_labels(plan),
                     "ownerReferences": [owned_by]},
        "spec": {
            # A restarted host would be an empty store the workers cannot rejoin: a host that
            # dies fails its gang, and the controller starts a new one.
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "tolerations": NODE_LOSS_TOLERATIONS,
            "containers": [
                {"name": HOST_CONTAINER, "image": plan.spec.image, "command": host,
                 "ports": [{"name": "c10d", "containerPort": RENDEZVOUS_PORT}],
                 "volumeMounts": mount,
                 "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}}},
                {"name": ROUNDS_CONTAINER, "image": plan.spec.image,
                 "command": ["python3", "-u", "-c", ROUNDS_FOLLOWER,
                             f"{RENDEZVOUS_DIR}/rounds.jsonl"],
                 "volumeMounts": mount,
                 "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}},
            ],
            "volumes": [{"name": "rendezvous", "emptyDir": {}}],
        },
    }


def rendezvous_service(plan: job_pb2.WorkerPlan, namespace: str, base: str, *,
                       owned_by: Obj) -> Obj:
    labels = gang_labels(plan)
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": gang_name(base, plan.rendezvous_id), "namespace": namespace,
                     "labels": labels, "ownerReferences": [owned_by]},
        "spec": {"selector": {GANG_LABEL: labels[GANG_LABEL],
                              RENDEZVOUS_LABEL: labels[RENDEZVOUS_LABEL]},
                 "publishNotReadyAddresses": True,
                 "ports": [{"name": "c10d", "port": RENDEZVOUS_PORT,
                            "targetPort": RENDEZVOUS_PORT}]},
    }


def pod_group(plan: job_pb2.WorkerPlan, namespace: str, base: str, *, owned_by: Obj) -> Obj:
    timeout = plan.spec.deadlines.scheduling_timeout_seconds or 600.0
    group, version, _ = PODGROUP_API
    return {
        "apiVersion": f"{group}/{version}", "kind": "PodGroup",
        "metadata": {"name": gang_name(base, plan.rendezvous_id), "namespace": namespace,
                     "labels": gang_labels(plan), "ownerReferences": [owned_by]},
        "spec": {"minMember": plan.gang_min,
                 "scheduleTimeoutSeconds": max(1, min(86400, round(timeout)))},
    }
