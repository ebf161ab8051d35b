"""The Kubernetes API client, configured from a kubeconfig or the pod's service account."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from alnair_common import ConfigError

from ._settings import KubeBridgeSettings


def api_client(settings: KubeBridgeSettings) -> k8s.ApiClient:
    """An ApiClient, or ConfigError saying which credentials were missing and how to give them."""
    cfg = k8s.Configuration()
    # Binds run in parallel (ALNAIR_BIND_CONCURRENCY): keep a connection per bind in flight.
    cfg.connection_pool_maxsize = max(4, settings.bind_concurrency * 2)
    try:
        if settings.kubeconfig is not None:
            k8s_config.load_kube_config(config_file=str(settings.kubeconfig), client_configuration=cfg)
        else:
            k8s_config.load_incluster_config(client_configuration=cfg)
        return k8s.ApiClient(cfg)
    except (ConfigException, OSError, TypeError, ValueError) as e:
        where = (f"ALNAIR_KUBECONFIG={settings.kubeconfig}" if settings.kubeconfig
                 else "in-cluster credentials (no ALNAIR_KUBECONFIG set)")
        raise ConfigError(f"cannot configure the Kubernetes client from {where}: {e}") from e


def list_pods(core: k8s.CoreV1Api, namespace: str, **kwargs: Any) -> Any:
    """List pods of ``namespace``, or of every namespace when it is empty (the bridge's
    scope: ALNAIR_WATCH_NAMESPACE unset); ``kwargs`` go to the API call."""
    if namespace:
        return core.list_namespaced_pod(namespace, **kwargs)
    return core.list_pod_for_all_namespaces(**kwargs)
