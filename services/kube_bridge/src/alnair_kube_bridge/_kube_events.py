"""Kubernetes Events kube-bridge records: one builder for the brains' Event commands and the
bridge's own warnings (a pod naming a data set that does not exist).

An Event is named after a key that is the same every time the same thing is said (a
command id; a pod uid and what is wrong with it), so a replay, a relist or a second bridge
finds it exists (409) and records nothing twice.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

COMPONENT = "alnair-kube-bridge"


def record_event(core: k8s.CoreV1Api, involved: k8s.V1ObjectReference, *, type: str,  # noqa: A002
                 reason: str, message: str, key: str, when: datetime) -> None:
    """Create the Event ``key`` names on ``involved`` (in its namespace, else default);
    ApiException for any refusal but "it exists"."""
    namespace = involved.namespace or "default"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    event = k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name=f"{involved.name[:200]}.{digest}", namespace=namespace),
        involved_object=involved, type=type, reason=reason, message=message[:1024],
        first_timestamp=when, last_timestamp=when, count=1,
        source=k8s.V1EventSource(component=COMPONENT),
        reporting_component="alnair.centaurus.io/kube-bridge", reporting_instance="kube-bridge")
    try:
        core.create_namespaced_event(namespace, event)
    except ApiException as e:
        if e.status != 409:  # 409: this Event exists (a replay)
            raise
