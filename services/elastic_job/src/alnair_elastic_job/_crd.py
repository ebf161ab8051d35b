"""The TrainingJob CustomResourceDefinition, built from the same limits as the domain.

The apiserver must refuse what :mod:`._job_spec` refuses (min > max, no replicas, an unknown
launcher, a share over 100 %), so a bad spec fails at ``kubectl apply`` with a message and
never reaches the controller. Building the schema from the domain's constants keeps the two
from drifting. Rules that span fields use CEL (``x-kubernetes-validations``), whose messages
say the fix.

The YAML in ``k8s/base/crds/`` is this dict rendered: ``python
tests/unit/deploy/test_deploy_crds.py`` writes it, and the test there fails when it is stale.
kube-bridge serves the objects: it submits each one to the controller and writes the job's
state into ``status``, whose schema is here too (``status_schema``).

The spec is immutable once created: the controller refuses another spec for a live job, and
the running workers' torchrun commands carry ``minReplicas:maxReplicas``, so a change could
only take effect by restarting every worker — that is a delete and a create, said so at
``kubectl apply`` rather than ignored. The world size within the range changes with
``alnair job scale``.
"""

from __future__ import annotations

from typing import Any

from alnair_common.crds import custom_resource_definition, rule

from ._job_codec import API_VERSION, KIND
from ._job_spec import (
    MAX_COMPUTE_PERCENT,
    MAX_MEMORY_GIB,
    MAX_REPLICAS,
    MAX_RESTARTS,
    MAX_SECONDS,
    MAX_WHOLE_GPUS,
    Launcher,
)

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "trainingjobs"


def _int(low: int, high: int, what: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high, "description": what}


def _seconds(what: str, *, positive: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": MAX_SECONDS, "description": what}
    if positive:
        schema["exclusiveMinimum"] = True
    return schema


def spec_schema() -> dict[str, Any]:
    launchers = [launcher.value for launcher in Launcher]
    return {
        "type": "object",
        "required": ["command", "minReplicas", "worker"],
        "x-kubernetes-validations": [
            rule("!has(self.launcher) || self.launcher != 'horovod'",
                  "launcher horovod is not supported: Horovod is unmaintained upstream and does not "
                  "build against current PyTorch; use torch-elastic (or torch for a fixed size)"),
            rule("!has(self.launcher) || self.launcher in " + str(launchers),
                  f"unknown launcher; use one of {', '.join(launchers)}"),
            rule("!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                  "minReplicas is more than maxReplicas; set minReplicas <= maxReplicas"),
            rule("!has(self.launcher) || self.launcher != 'torch' || "
                  "(has(self.maxReplicas) ? self.maxReplicas : self.minReplicas) == self.minReplicas",
                  "launcher torch runs a fixed world size: set minReplicas == maxReplicas or use "
                  "torch-elastic"),
        ],
        "properties": {
            "launcher": {"type": "string", "default": Launcher.TORCH_ELASTIC.value,
                         "description": "torch-elastic (torchrun, world size within min..max), "
                                        "torch-inprocess (the command is an alnair_trainer trainer kept "
                                        "alive across rounds, world size within min..max) or torch "
                                        "(torchrun, fixed)"},
            "image": {"type": "string", "description": "Worker image"},
            "command": {"type": "array", "minItems": 1, "maxItems": 4096,
                        "items": {"type": "string", "minLength": 1, "maxLength": 65536},
                        "description": "The training command, e.g. [python, train.py]"},
            "minReplicas": _int(1, MAX_REPLICAS, "Workers the job needs to run (a gang)"),
            "maxReplicas": _int(1, MAX_REPLICAS, "Workers it may grow to (default: minReplicas)"),
            "worker": {
                "type": "object", "description": "What each worker asks of a GPU",
                "properties": {
                    "gpuMemoryGiB": _int(1, MAX_MEMORY_GIB, "alnair/vgpu-memory of one card, GiB"),
                    "gpuComputePercent": _int(1, MAX_COMPUTE_PERCENT,
                                              "alnair/vgpu-compute of one card, percent"),
                    "gpus": _int(1, MAX_WHOLE_GPUS, "Whole GPUs instead of a share"),
                },
                "x-kubernetes-validations": [
                    rule("has(self.gpus) ? !has(self.gpuMemoryGiB) && !has(self.gpuComputePercent) "
                          ": has(self.gpuMemoryGiB) && has(self.gpuComputePercent)",
                          "set either gpus (whole cards) or both gpuMemoryGiB and gpuComputePercent "
                          "(a share of one card)"),
                ],
            },
            "checkpoint": {"type": "string", "maxLength": 4096,
                           "description": "Where workers save and resume checkpoints"},
            "restartPolicy": {
                "type": "object",
                "properties": {
                    "maxRestarts": _int(0, MAX_RESTARTS, "Worker failures the job survives"),
                    "backoffSeconds": _seconds("Wait before the first restart, and before asking again for "
                                                "a worker the scheduler refused; doubled each time"),
                    "maxBackoffSeconds": _seconds("The doubling stops here"),
                },
                "x-kubernetes-validations": [
                    rule("!has(self.backoffSeconds) || !has(self.maxBackoffSeconds) || "
                          "self.maxBackoffSeconds >= self.backoffSeconds",
                          "maxBackoffSeconds is less than backoffSeconds"),
                ],
            },
            "deadlines": {
                "type": "object",
                "properties": {
                    "schedulingTimeoutSeconds": _seconds("Longest wait for a gang", positive=True),
                    "rendezvousTimeoutSeconds": _seconds("Longest wait for a rendezvous", positive=True),
                    "activeDeadlineSeconds": _seconds("Longest life of the job (0: none)"),
                },
            },
        },
    }


def _time(what: str) -> dict[str, Any]:
    return {"type": "string", "format": "date-time", "description": what}


def status_schema() -> dict[str, Any]:
    """What kube-bridge writes from the controller's JobState (``alnair.job.<name>.state``)."""
    count: dict[str, Any] = {"type": "integer", "minimum": 0}
    condition = {
        "type": "object", "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "description": "Scheduling, Running, Succeeded or Failed"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "description": "CamelCase, e.g. WaitingForGang"},
            "message": {"type": "string"},
            "lastTransitionTime": _time("When status last changed"),
        },
    }
    return {
        "type": "object",
        "properties": {
            "phase": {"type": "string", "description": "The controller's phase: Pending, Scheduling, "
                      "Running, Rescaling, Recovering, Deleting, Succeeded, Failed or Deleted"},
            "reason": {"type": "string", "description": "Why the job is in its phase (CamelCase)"},
            "message": {"type": "string", "description": "The same for people"},
            "replicas": {**count, "description": "Workers running now: the world size"},
            "targetReplicas": {**count, "description": "World size the controller drives towards"},
            "restarts": {**count, "description": "Restarts used (of spec.restartPolicy.maxRestarts)"},
            "goodput": {"type": "number", "minimum": 0, "maximum": 1,
                        "description": "Useful step time / wall time since the job first ran"},
            "observedGeneration": {**count, "format": "int64",
                                   "description": "metadata.generation the status describes"},
            "stateGeneration": {**count, "format": "int64",
                                "description": "The controller's transition counter of the job "
                                               "written last; an older state is not written"},
            "startTime": _time("When the controller accepted the job"),
            "lastTransitionTime": _time("When the current phase began"),
            "conditions": {"type": "array", "items": condition,
                           "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        },
    }


def training_job_crd() -> dict[str, Any]:
    """The whole CRD document (apiextensions.k8s.io/v1)."""
    columns = [("Phase", "string", ".status.phase", 0), ("Replicas", "integer", ".status.replicas", 0),
               ("Target", "integer", ".status.targetReplicas", 1),
               ("Restarts", "integer", ".status.restarts", 0), ("Goodput", "number", ".status.goodput", 0),
               ("Reason", "string", ".status.reason", 1), ("Age", "date", ".metadata.creationTimestamp", 0)]
    spec = spec_schema()
    spec["x-kubernetes-validations"] = [
        *spec["x-kubernetes-validations"],
        rule("self == oldSelf", "spec is immutable: delete the TrainingJob and create it again to "
              "change it (the running workers' torchrun commands carry minReplicas:maxReplicas); "
              "`alnair job scale` changes the world size within the range"),
    ]
    return custom_resource_definition(
        group=GROUP, version=VERSION, kind=KIND, plural=PLURAL, singular="trainingjob",
        short_names=["tj"], columns=columns, spec=spec, status=status_schema())
