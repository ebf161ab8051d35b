"""The TrainingJob CustomResourceDefinition, built from the same limits as the domain.

The apiserver must refuse what :mod:`._job_spec` refuses (min > max, no replicas, an unknown
launcher, a share over 100 %), so a bad spec fails at ``kubectl apply`` with a message and
never reaches the controller. Building the schema from the domain's constants keeps the two
from drifting; ``k8s/`` can render this dict to YAML (kube-bridge's owner adds it there).
Rules that span fields use CEL (``x-kubernetes-validations``), whose messages say the fix.
"""

from __future__ import annotations

from typing import Any

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


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def spec_schema() -> dict[str, Any]:
    launchers = [launcher.value for launcher in Launcher]
    return {
        "type": "object",
        "required": ["command", "minReplicas", "worker"],
        "x-kubernetes-validations": [
            _rule("!has(self.launcher) || self.launcher != 'horovod'",
                  "launcher horovod is not supported: Horovod is unmaintained upstream and does not "
                  "build against current PyTorch; use torch-elastic (or torch for a fixed size)"),
            _rule("!has(self.launcher) || self.launcher in " + str(launchers),
                  f"unknown launcher; use one of {', '.join(launchers)}"),
            _rule("!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                  "minReplicas is more than maxReplicas; set minReplicas <= maxReplicas"),
            _rule("!has(self.launcher) || self.launcher != 'torch' || "
                  "(has(self.maxReplicas) ? self.maxReplicas : self.minReplicas) == self.minReplicas",
                  "launcher torch runs a fixed world size: set minReplicas == maxReplicas or use "
                  "torch-elastic"),
        ],
        "properties": {
            "launcher": {"type": "string", "default": Launcher.TORCH_ELASTIC.value,
                         "description": "torch-elastic (world size within min..max) or torch (fixed)"},
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
                    _rule("has(self.gpus) ? !has(self.gpuMemoryGiB) && !has(self.gpuComputePercent) "
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
                    "backoffSeconds": _seconds("Wait before the first restart, doubled each time"),
                    "maxBackoffSeconds": _seconds("The doubling stops here"),
                },
                "x-kubernetes-validations": [
                    _rule("!has(self.backoffSeconds) || !has(self.maxBackoffSeconds) || "
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


def training_job_crd() -> dict[str, Any]:
    """The whole CRD document (apiextensions.k8s.io/v1)."""
    columns = [("Phase", "string", ".status.phase"), ("Reason", "string", ".status.reason"),
               ("World", "integer", ".status.replicas"), ("Target", "integer", ".status.targetReplicas")]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "trainingjob", "kind": KIND,
                      "shortNames": ["tj"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": n, "type": t, "jsonPath": p}
                                             for n, t, p in columns],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "spec": spec_schema(),
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    },
                }},
            }],
        },
    }
