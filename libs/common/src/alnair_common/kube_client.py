"""The Kubernetes API client of the services that talk to the API server (kube-bridge, the
admission webhook), configured from a kubeconfig or the pod's service account.

It needs the ``kubernetes`` package, which only those services install: imported on use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def api_client(kubeconfig: Path | None, *, pool_size: int | None = None) -> ApiClient:
    """An ApiClient from ``kubeconfig`` (None: in-cluster credentials), keeping up to
    ``pool_size`` connections; ConfigError saying which credentials were missing and how to
    give them."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    cfg = k8s.Configuration()
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    try:
        if kubeconfig is not None:
            k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        else:
            k8s_config.load_incluster_config(client_configuration=cfg)
        return k8s.ApiClient(cfg)
    except (ConfigException, OSError, TypeError, ValueError) as e:
        where = (f"ALNAIR_KUBECONFIG={kubeconfig}" if kubeconfig
                 else "in-cluster credentials (no ALNAIR_KUBECONFIG set)")
        raise ConfigError(f"cannot configure the Kubernetes client from {where}: {e}") from e
