"""The S3 gateway sidecar: how code reading ``s3://`` with boto3 or s3fs reads through the cache.

Where the operator names the gateway's image (``ALNAIR_POD_S3_GATEWAY_IMAGE``: an image with
the data client, such as the dataset-csi one) and a pod's data set comes from ``s3://``, the
pod gets the data client's read-only S3 endpoint (``alnair_dataset.s3_gateway``) as a native
sidecar (an init container with ``restartPolicy: Always``, first, so it also serves the pod's
other init containers) listening on the pod's loopback, and its other containers get
``AWS_ENDPOINT_URL_S3=http://127.0.0.1:<port>`` (a container that sets it keeps its own).
A pod annotated ``ai.centaurus.io/dataset-s3-gateway: "off"`` gets neither (its code
writes to S3, which the read-only gateway refuses). Every S3 client in the other pods'
containers then talks to the gateway: the data sets' objects come
from the cache, other keys and writes are refused with an S3 error naming the fix (the
gateway's docstring).

The gateway reads misses from the source with the AWS environment of the pod's first
container (its ``AWS_*`` ``env`` entries and its ``envFrom``, copied): the credentials the
code would have used. Only the pod's own containers reach its loopback, so the gateway does
not check signatures. Its startup probe connects to that port, so the pod's other
containers start only once it answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._pod_env import AWS_S3_ENDPOINT

SIDECAR = "alnair-s3-gateway"
PORT = 9494
ENDPOINT = f"http://127.0.0.1:{PORT}"
_PROBE = f"import socket; socket.create_connection(('127.0.0.1', {PORT}), 1).close()"


def sidecar(image: str, shared_env: Sequence[tuple[str, str]], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The gateway's container: the data client's environment (not the redirect to itself)
    and the first container's AWS settings, to read the sources with."""
    first = (spec.get("containers") or [{}])[0]
    env = [{"name": k, "value": v} for k, v in shared_env if k != AWS_S3_ENDPOINT]
    env += [dict(e) for e in first.get("env") or () if str(e.get("name", "")).startswith("AWS_")
            and e.get("name") != AWS_S3_ENDPOINT]
    container: dict[str, Any] = {
        "name": SIDECAR, "image": image, "restartPolicy": "Always",
        "command": ["alnair-dataset-s3-gateway", "--listen", f"127.0.0.1:{PORT}"],
        "env": env,
        "startupProbe": {"exec": {"command": ["python3", "-c", _PROBE]},
                         "periodSeconds": 1, "failureThreshold": 60},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "runAsUser": 10001,
                            "capabilities": {"drop": ["ALL"]}},
    }
    if first.get("envFrom"):
        container["envFrom"] = [dict(e) for e in first["envFrom"]]
    return container


def insert_sidecar(spec: Mapping[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The patch operation putting ``container`` first among the init containers. It must be
    the last operation on containers: it shifts every init container's index."""
    if spec.get("initContainers"):
        return {"op": "add", "path": "/spec/initContainers/0", "value": container}
    return {"op": "add", "path": "/spec/initContainers", "value": [container]}


def has_sidecar(spec: Mapping[str, Any]) -> bool:
    return any(c.get("name") == SIDECAR for c in spec.get("initContainers") or ())
