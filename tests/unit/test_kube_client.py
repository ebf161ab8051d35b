"""The Kubernetes client kube-bridge and the admission webhook share: a clear error for missing
credentials, the kubeconfig's server and the pool size asked for otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair_common import ConfigError
from alnair_common.kube_client import api_client

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_kubeconfig_gives_its_server_and_the_pool_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    client = api_client(path, pool_size=12)
    assert client.configuration.host == "https://127.0.0.1:6443"
    assert client.configuration.connection_pool_maxsize == 12
    client.close()


def test_missing_credentials_say_where_they_were_looked_for(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"ALNAIR_KUBECONFIG=.*nowhere"):
        api_client(tmp_path / "nowhere")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="in-cluster credentials"):
        api_client(None)
