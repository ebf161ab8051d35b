"""Warning Events on the pods the webhook could not fully switch to the cache.

At admission the pod is not stored yet and, when it is made from ``generateName`` (every pod
of a Deployment, Job or StatefulSet's ReplicaSet…), it has no name yet either: the API server
generates it after mutating admission. Such a pod's Event goes on its controlling owner
(``kubectl describe replicaset/job …`` shows it), its message naming the pod's prefix. A pod
with neither name nor owner gets an Event named after its prefix, which ``kubectl describe
pod`` cannot find: the response's ``warnings`` (printed by kubectl) are then what the user
sees. Sending is best effort and off the admission's path: a failure is logged, never turned
into a denied or slowed pod.
"""

from __future__ import annotations

import datetime as dt
import socket
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from alnair_common import get_logger

COMPONENT = "alnair-admission-webhook"
log = get_logger("alnair.admission-webhook")


class PodEvents:
    def __init__(self, core: k8s.CoreV1Api, *, instance: str | None = None,
                 timeout: float = 5.0) -> None:
        self.core = core
        self.instance = instance or socket.gethostname()
        self.timeout = timeout

    def warn(self, namespace: str, pod: Mapping[str, Any], reason: str, message: str) -> bool:
        """Record a Warning Event about ``pod``; False (and a log line) if it failed."""
        meta = pod.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or "unknown"
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name}
        if meta.get("uid"):
            involved["uid"] = meta["uid"]
        owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
        if not meta.get("name") and owner and owner.get("name") and owner.get("kind"):
            involved = {"apiVersion": owner.get("apiVersion", ""), "kind": owner["kind"],
                        "namespace": namespace, "name": owner["name"], "uid": owner.get("uid", "")}
            message = f"pod {name}…: {message}"
            name = owner["name"]
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name.rstrip('-.')}.", "namespace": namespace},
            "involvedObject": involved, "reason": reason, "message": message[:1024],
            "type": "Warning", "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.instance[:128],
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.core.create_namespaced_event(namespace, body, _request_timeout=self.timeout)
            return True
        except (ApiException, OSError) as e:
            log.warning("event not recorded", namespace=namespace, pod=name, reason=reason,
                        error=getattr(e, "reason", None) or repr(e))
            return False
