"""The Kubernetes API client, configured from a kubeconfig or the pod's service account."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from alnair_common import ConfigError

from ._settings import KubeBridgeSettings


def api_client(settings: KubeBridgeSettings) -> k8s.ApiClient:
    """An ApiClient, or ConfigError saying which credentials were missing and how to give them."""
    try:
        if settings.kubeconfig is not None:
            return k8s_config.new_client_from_config(config_file=str(settings.kubeconfig))
        cfg = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=cfg)
        return k8s.ApiClient(cfg)
    except (ConfigException, OSError, TypeError, ValueError) as e:
        where = (f"ALNAIR_KUBECONFIG={settings.kubeconfig}" if settings.kubeconfig
                 else "in-cluster credentials (no ALNAIR_KUBECONFIG set)")
        raise ConfigError(f"cannot configure the Kubernetes client from {where}: {e}") from e
