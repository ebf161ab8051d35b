"""The bundle's Prometheus configuration, run by a real Prometheus.

The test plane's Prometheus is Debian's build, which leaves Kubernetes service discovery
out, so the pod discovery is the one part replaced: each ``kubernetes_sd_configs`` (role
pod, own namespace) becomes a file discovery listing pods with the very ``__meta_kubernetes_*``
labels that Kubernetes discovery gives them. Everything else — the jobs, intervals and every
relabelling rule — is the shipped file, so this proves what gets scraped, where, and how
the series are labelled.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_render import render
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until
from alnair_common.testing._server_process import ServerProcess
from alnair_common.testing.prometheus import PrometheusServer
from alnair_common.testing.testbin import locate


def pod(name: str, app: str, *, port: int | None, node: str = "gpu-node-1") -> dict[str, Any]:
    """A pod as Kubernetes discovery (role: pod) labels it; address = pod IP : container port."""
    labels = {
        "__address__": "127.0.0.1:1",
        "__meta_kubernetes_namespace": "alnair-system",
        "__meta_kubernetes_pod_name": name,
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
    }
    if port is not None:
        labels |= {"__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
                   "__meta_kubernetes_pod_annotation_prometheus_io_port": str(port),
                   "__meta_kubernetes_pod_annotation_prometheus_io_path": "/metrics"}
    return {"targets": [labels.pop("__address__")], "labels": labels}


@pytest.fixture
def metrics_endpoints() -> Iterator[tuple[int, int]]:
    """Two real /metrics servers standing at the ports the pods' annotations name."""
    servers = []
    for metric in ("alnair_exporter_simulated", "alnair_scheduler_pending_workloads"):
        registry = CollectorRegistry()
        Gauge(metric, "a metric of this endpoint", registry=registry).set(1)
        port = free_port()
        servers.append((start_http_server(port, addr="127.0.0.1", registry=registry), port))
    try:
        yield servers[0][1], servers[1][1]
    finally:
        for (server, thread), _ in servers:
            server.shutdown()
            server.server_close()
            thread.join(5)


def test_shipped_relabelling_scrapes_annotated_pods_by_job(tmp_path: Path, metrics_endpoints: tuple[int, int]) -> None:
    exporter_port, scheduler_port = metrics_endpoints
    config_map = next(d for d in render("prod") if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"].startswith("alnair-prometheus-config"))
    config = yaml.safe_load(config_map["data"]["prometheus.yml"])
    pods = [pod("alnair-exporter-x7k2p", "alnair-exporter", port=exporter_port),
            pod("alnair-scheduler-6d9f-abcde", "alnair-scheduler", port=scheduler_port, node="cpu-node-1"),
            pod("alnair-nats-0", "alnair-nats", port=None)]
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    discovered = 0
    for job in config["scrape_configs"]:
        job["scrape_interval"] = "1s"  # the test's pace; the shipped intervals are checked below
        sd = job.pop("kubernetes_sd_configs", None)
        if sd is not None:
            assert sd == [{"role": "pod", "namespaces": {"own_namespace": True}}], f"{job['job_name']}: {sd}"
            job["file_sd_configs"] = [{"files": [str(tmp_path / "pods.json")], "refresh_interval": "1s"}]
            discovered += 1
    assert discovered == 2
    config["global"]["evaluation_interval"] = config["global"]["scrape_interval"] = "1s"
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    testbin = locate()
    check = subprocess.run([str(testbin.path("promtool")), "check", "config", str(tmp_path / "prometheus.yml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    process = ServerProcess("prometheus", [
        testbin.path("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ], tmp_path / "prometheus.log")
    try:
        prom = PrometheusServer(f"http://127.0.0.1:{port}", [], process)
        wait_until(lambda: _ready(prom), timeout=60, what="Prometheus ready")
        up = {"alnair-exporter": prom.wait_for_value(
                  'up{job="alnair-exporter",service="alnair-exporter",node="gpu-node-1",'
                  'instance_pod="alnair-exporter-x7k2p"}'),
              "alnair-scheduler": prom.wait_for_value(
                  'up{job="alnair-services",service="alnair-scheduler",node="cpu-node-1"}')}
        assert up == {"alnair-exporter": 1.0, "alnair-scheduler": 1.0}
        assert prom.wait_for_value('alnair_exporter_simulated{job="alnair-exporter"}') == 1.0
        # Each pod is scraped by exactly one job, and a pod without the annotation by none.
        targets = {(r["metric"]["job"], r["metric"]["service"]) for r in prom.query("up")
                   if "service" in r["metric"]}
        assert targets == {("alnair-exporter", "alnair-exporter"), ("alnair-services", "alnair-scheduler")}
    finally:
        process.stop()
    shipped = yaml.safe_load(config_map["data"]["prometheus.yml"])
    intervals = {job["job_name"]: job.get("scrape_interval", shipped["global"]["scrape_interval"])
                 for job in shipped["scrape_configs"]}
    assert intervals == {"alnair-exporter": "5s", "alnair-services": "15s", "prometheus": "15s"}


def _ready(prom: PrometheusServer) -> bool:
    try:
        prom.query("1")
        return True
    except Exception:  # noqa: BLE001 - not listening yet
        return False
