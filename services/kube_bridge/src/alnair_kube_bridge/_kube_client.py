"""The Kubernetes API client, configured from a kubeconfig or the pod's service account."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from alnair_common.kube_client import api_client as shared_api_client

from ._settings import KubeBridgeSettings


def api_client(settings: KubeBridgeSettings) -> k8s.ApiClient:
    """An ApiClient, or ConfigError saying which credentials were missing and how to give them.
    Binds run in parallel (ALNAIR_BIND_CONCURRENCY): a connection per bind in flight."""
    return shared_api_client(settings.kubeconfig, pool_size=max(4, settings.bind_concurrency * 2))


def list_pods(core: k8s.CoreV1Api, namespace: str, **kwargs: Any) -> Any:
    """List pods of ``namespace``, or of every namespace when it is empty (the bridge's
    scope: ALNAIR_WATCH_NAMESPACE unset); ``kwargs`` go to the API call."""
    if namespace:
        return core.list_namespaced_pod(namespace, **kwargs)
    return core.list_pod_for_all_namespaces(**kwargs)
