"""A training job's pods bound to a node that is gone are deleted at once, so the job
replaces them.

Kubernetes ends them late, or in a cluster without kube-controller-manager never: pods
bound to a deleted node wait for its pod garbage collector, and a graceful delete of a pod
whose kubelet is gone stays "Terminating" for good. A lost worker that is still listed is a
job that waits: its survivors block in the rendezvous until the worker is replaced. So when
a Node is deleted, or is missing from a relist (it went while nobody watched), kube-bridge
force-deletes (grace 0: no kubelet is left to confirm) the pods it made for training jobs —
workers and rendezvous hosts, found by the managed-by label it put on them — that are bound
to that node, each with its uid as precondition. The pod watch then reports each as DELETED,
which the elastic-job controller reads as a lost worker (or a lost gang, for the host).
Nodes that stop answering but stay listed are left to Kubernetes: the job's pods tolerate
that for NODE_LOSS_TOLERATION_SECONDS only (_job_objects).

Deleting needs the training-jobs ClusterRole bound in the pod's namespace, as for every
other change to a job's pods; without it the pod is left and a warning names the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import client as k8s

from alnair_common import get_logger

from ._job_objects import MANAGED_SELECTOR
from ._job_workers import JOBS_ROLE, binding_command
from ._kube_client import list_pods
from ._kube_errors import KubeApiError, api_call

log = get_logger("alnair.kube-bridge.lost-nodes")
Obj = dict[str, Any]


class LostNodes:
    def __init__(self, core: k8s.CoreV1Api, namespace: str = "") -> None:
        self.core = core
        self.namespace = namespace  # "" = every namespace (the bridge's own scope)

    def node_deleted(self, node: str) -> list[str]:
        """Force-delete the managed pods bound to ``node``; their names."""
        if not node:
            return []
        return self._delete(self._managed_pods(f"spec.nodeName={node}"), reason=f"node {node} was deleted")

    def nodes_listed(self, present: Iterable[str]) -> list[str]:
        """After a relist: the managed pods bound to a node that is not in ``present``."""
        known = set(present)
        lost = [p for p in self._managed_pods("")
                if (p.spec.node_name or "") and p.spec.node_name not in known]
        return self._delete(lost, reason="its node is no longer in the cluster")

    def _managed_pods(self, field_selector: str) -> list[k8s.V1Pod]:
        listing = api_call("list the job pods of a lost node", lambda: list_pods(
            self.core, self.namespace, label_selector=MANAGED_SELECTOR, field_selector=field_selector))
        return [p for p in listing.items if p.status is None or p.status.phase not in ("Succeeded", "Failed")]

    def _delete(self, pods: list[k8s.V1Pod], *, reason: str) -> list[str]:
        deleted = []
        for pod in pods:
            meta = pod.metadata
            options = k8s.V1DeleteOptions(grace_period_seconds=0,
                                          preconditions=k8s.V1Preconditions(uid=meta.uid))
            try:
                # 404: gone already; 409: the name is another pod's now (this one is gone too).
                api_call(f"delete pod {meta.namespace}/{meta.name}",
                         lambda m=meta, o=options: self.core.delete_namespaced_pod(m.name, m.namespace, body=o),
                         absent=(404, 409))
            except KubeApiError as e:
                if e.status != 403:
                    raise
                log.warning(f"cannot delete a lost node's job pod in namespace {meta.namespace}: bind "
                            f"ClusterRole {JOBS_ROLE} to kube-bridge there: "
                            f"{binding_command(meta.namespace, str(e))}", namespace=meta.namespace,
                            pod=meta.name, node=pod.spec.node_name)
                continue
            log.info("job pod of a lost node deleted", namespace=meta.namespace, pod=meta.name,
                     node=pod.spec.node_name, why=reason)
            deleted.append(meta.name)
        return deleted
