"""Fake GPU nodes and pod lifecycles without kubelets, by kwok.

kwok watches the apiserver and plays *stages*: node Ready, pod Running, pod finished, pod
deleted. The stages are written here rather than taken from kwok's defaults because the
``kwok`` binary ships none (``kwokctl`` normally passes them) and because the tests need
one lifecycle kwok lacks: a Running pod that finishes when the test says so. A test asks
by annotating the pod (:func:`finish_pod`), which is what a real workload's exit is to the
scheduler and profiler: a phase change they observe through the API.

Only nodes carrying ``kwok.x-k8s.io/node: fake`` are managed, so a test can still create
nodes that no kubelet serves (they stay NotReady, as real dead nodes do).
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._plane_errors import PlaneError
from ._server_process import ServerProcess
from .kube import KubePlane

MANAGED_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""The annotation kwok selects its nodes by."""

FINISH_ANNOTATION = "testplane.alnair.io/finish"
"""Set to ``Succeeded`` or ``Failed`` on a Running pod to make kwok finish it."""

VGPU_MEMORY = "alnair/vgpu-memory"
VGPU_COMPUTE = "alnair/vgpu-compute"
COMPUTE_PER_GPU = 100
"""``alnair/vgpu-compute`` is percent of one GPU, so a node offers 100 per card."""

START_TIMEOUT_SECONDS = 30.0
NODE_READY_TIMEOUT_SECONDS = 30.0
POD_PHASE_TIMEOUT_SECONDS = 30.0


@dataclass
class KwokController:
    """The running kwok process and the plane it serves."""

    plane: KubePlane
    process: ServerProcess
    health_url: str

    def stop(self) -> None:
        self.process.stop()


def start_kwok(plane: KubePlane, workdir: Path, *,
               timeout: float = START_TIMEOUT_SECONDS) -> KwokController:
    """Start kwok against ``plane`` and wait until its health endpoint answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "kwok-stages.yaml"
    config.write_text(yaml.safe_dump_all(_stages(), sort_keys=False))
    port = free_port()
    key, value = MANAGED_ANNOTATION
    process = ServerProcess("kwok", [
        plane.testbin.path("kwok"),
        f"--kubeconfig={plane.kubeconfig}",
        f"--config={config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--server-address={LOOPBACK}:{port}",
        "--cidr=10.244.0.0/16",
        "--node-ip=10.0.0.1",
    ], workdir / "kwok.log")
    controller = KwokController(plane, process, f"http://{LOOPBACK}:{port}/healthz")
    try:
        poll_until(lambda: _healthy(controller.health_url), what="kwok /healthz",
                   timeout=timeout, process=process)
    except BaseException:
        process.stop()
        raise
    return controller


def gpu_node_manifest(name: str, *, gpus: int, gpu_memory_gib: int) -> dict[str, Any]:
    """A Node that kwok manages, offering ``gpus`` cards of ``gpu_memory_gib`` GiB each.

    The status is set at creation (the apiserver keeps a new node's status) so the extended
    resources are there before kwok marks the node Ready; kwok's initialize stage keeps
    them.
    """
    if gpus < 0 or gpu_memory_gib < 0:
        raise PlaneError(f"node {name}: gpus={gpus} and gpu_memory_gib={gpu_memory_gib} "
                         "must be >= 0")
    resources = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
        VGPU_MEMORY: str(gpus * gpu_memory_gib),
        VGPU_COMPUTE: str(gpus * COMPUTE_PER_GPU),
    }
    key, value = MANAGED_ANNOTATION
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {key: value},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


@dataclass
class KwokNodes:
    """Creates fake GPU nodes for one test and deletes them afterwards.

    Call it: ``kwok_nodes(count=2, gpus_per_node=4, gpu_memory_gib=80)`` returns the node
    names once every node is Ready.
    """

    api_client: k8s.ApiClient
    name_prefix: str = "kwok"
    created: list[str] = field(default_factory=list)

    def __call__(self, count: int = 1, gpus_per_node: int = 1, gpu_memory_gib: int = 80,
                 *, timeout: float = NODE_READY_TIMEOUT_SECONDS) -> list[str]:
        core = k8s.CoreV1Api(self.api_client)
        names = [f"{self.name_prefix}-{secrets.token_hex(3)}-{i}" for i in range(count)]
        for name in names:
            core.create_node(gpu_node_manifest(name, gpus=gpus_per_node,
                                               gpu_memory_gib=gpu_memory_gib))
            self.created.append(name)
        for name in names:
            poll_until(lambda n=name: _node_ready(core, n), what=f"node {name} Ready (kwok)",
                       timeout=timeout)
        return names

    def bind(self, namespace: str, pod: str, node: str) -> None:
        """Bind a pod to a node through the Binding API, as a scheduler does."""
        bind_pod(self.api_client, namespace, pod, node)

    def wait_for_phase(self, namespace: str, pod: str, phase: str, *,
                       timeout: float = POD_PHASE_TIMEOUT_SECONDS) -> k8s.V1Pod:
        """Wait until the pod reports ``phase`` (``Running``, ``Succeeded``...)."""
        return wait_for_pod_phase(self.api_client, namespace, pod, phase, timeout=timeout)

    def finish(self, namespace: str, pod: str, *, succeeded: bool = True) -> None:
        """Ask kwok to end a Running pod with exit code 0 (or 1)."""
        finish_pod(self.api_client, namespace, pod, succeeded=succeeded)

    def delete_all(self) -> None:
        """Delete the nodes this test created; already-gone nodes are fine."""
        core = k8s.CoreV1Api(self.api_client)
        for name in self.created:
            try:
                core.delete_node(name)
            except ApiException as e:
                if e.status != 404:
                    raise
        self.created.clear()


def bind_pod(api_client: k8s.ApiClient, namespace: str, pod: str, node: str) -> None:
    """POST a Binding for ``pod`` to ``node``.

    The response is a Status, not a Binding; the generated client would fail to parse it
    as one, so the body is read raw.
    """
    body = k8s.V1Binding(metadata=k8s.V1ObjectMeta(name=pod),
                         target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node))
    response = k8s.CoreV1Api(api_client).create_namespaced_binding(
        namespace, body, _preload_content=False)
    response.read()  # to the end, so the connection can go back to the pool
    response.release_conn()


def finish_pod(api_client: k8s.ApiClient, namespace: str, pod: str, *,
               succeeded: bool = True) -> None:
    """Annotate a Running pod so kwok moves it to Succeeded (exit 0) or Failed (exit 1)."""
    phase = "Succeeded" if succeeded else "Failed"
    k8s.CoreV1Api(api_client).patch_namespaced_pod(
        pod, namespace, {"metadata": {"annotations": {FINISH_ANNOTATION: phase}}})


def wait_for_pod_phase(api_client: k8s.ApiClient, namespace: str, pod: str, phase: str, *,
                       timeout: float = POD_PHASE_TIMEOUT_SECONDS) -> k8s.V1Pod:
    core = k8s.CoreV1Api(api_client)

    def current() -> k8s.V1Pod | None:
        obj = core.read_namespaced_pod(pod, namespace)
        return obj if obj.status and obj.status.phase == phase else None

    return poll_until(current, what=f"pod {namespace}/{pod} phase {phase}", timeout=timeout)


def _node_ready(core: k8s.CoreV1Api, name: str) -> bool:
    node = core.read_node(name)
    return any(c.type == "Ready" and c.status == "True"
               for c in (node.status.conditions or []))


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except urllib.error.HTTPError as e:
        e.close()
        return False


def _stage(name: str, kind: str, selector: dict[str, Any], nxt: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind},
                 "selector": selector, "next": nxt},
    }


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expr["values"] = list(values)
    return expr


_NOT_DELETING = _expr(".metadata.deletionTimestamp", "DoesNotExist")
_READY_STATUS = '.status.conditions.[] | select( .type == "Ready" ) | .status'

# Go templates rendered by kwok into the object's status. Resources are copied from the
# node's own status so the extended GPU resources set at creation survive.
_NODE_READY_STATUS = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
addresses:
- type: InternalIP
  address: {{ NodeIP | Quote }}
- type: Hostname
  address: {{ NodeName | Quote }}
capacity: {{ with .status.capacity }}{{ YAML . 1 }}{{ else }}{}{{ end }}
allocatable: {{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}{}{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  osImage: kwok
  machineID: ""
  bootID: ""
  systemUUID: ""
phase: Running
"""

_POD_RUNNING_STATUS = """\
{{ $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
          ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
conditions:
{{ range list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
- type: {{ . }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
"""

_POD_FINISHED_STATUS = """\
{{{{ $now := Now }}}}
phase: {phase}
conditions:
{{{{ range list "ContainersReady" "Ready" }}}}
- type: {{{{ . }}}}
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{{{ $now | Quote }}}}
{{{{ end }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- name: {{{{ .name | Quote }}}}
  image: {{{{ .image | Quote }}}}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: {exit_code}
      reason: {reason}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
"""


def _stages() -> list[dict[str, Any]]:
    stages = [
        _stage("alnair-node-ready", "Node",
               {"matchExpressions": [_expr(_READY_STATUS, "NotIn", "True")]},
               {"statusTemplate": _NODE_READY_STATUS}),
        _stage("alnair-pod-running", "Pod",
               {"matchExpressions": [_NOT_DELETING,
                                     _expr(".status.phase", "In", "Pending"),
                                     _expr(_READY_STATUS, "NotIn", "True")]},
               {"statusTemplate": _POD_RUNNING_STATUS}),
        # kwok deletes pods being deleted at once, as a kubelet would after the grace period.
        _stage("alnair-pod-delete", "Pod",
               {"matchExpressions": [_expr(".metadata.deletionTimestamp", "Exists")]},
               {"delete": True}),
    ]
    for phase, exit_code, reason in (("Succeeded", 0, "Completed"), ("Failed", 1, "Error")):
        stages.append(_stage(
            f"alnair-pod-{phase.lower()}-on-request", "Pod",
            {"matchAnnotations": {FINISH_ANNOTATION: phase},
             "matchExpressions": [_NOT_DELETING, _expr(".status.phase", "In", "Running")]},
            {"statusTemplate": _POD_FINISHED_STATUS.format(
                phase=phase, exit_code=exit_code, reason=reason)},
        ))
    return stages
