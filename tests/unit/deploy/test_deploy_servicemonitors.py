"""k8s/monitoring: the Prometheus Operator's ServiceMonitors select what the plain config scrapes.

The operator's CRDs are not part of the test plane, so the objects are checked here against
the bundle they point at: each selects the intended Services of the prod overlay, in the
bundle's namespace, through ports those Services define and the pods serve /metrics on.
"""

from __future__ import annotations

from typing import Any

import yaml
from deploy_render import K8S, NAMESPACE, SERVICES, find, kustomize_build, main_container, render


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "NotIn" and value in expr["values"]:
            return False
        assert expr["operator"] in ("In", "NotIn"), f"operator {expr['operator']} not handled by this test"
    return True


def test_service_monitors_select_every_alnair_service_once_on_its_metrics_port() -> None:
    monitors = [d for d in yaml.safe_load_all(kustomize_build(K8S / "monitoring")) if d]
    assert {m["kind"] for m in monitors} == {"ServiceMonitor"}
    docs = render("prod")
    services = [d for d in docs if d["kind"] == "Service"]
    scraped: dict[str, str] = {}
    for monitor in monitors:
        assert monitor["metadata"]["namespace"] == NAMESPACE
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        (endpoint,) = monitor["spec"]["endpoints"]
        for service in services:
            if not selects(monitor["spec"]["selector"], service["metadata"]["labels"]):
                continue
            name = service["metadata"]["name"]
            assert name not in scraped, f"{name} is scraped by {scraped[name]} and {monitor['metadata']['name']}"
            scraped[name] = monitor["metadata"]["name"]
            port = next((p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]), None)
            assert port is not None, f"Service {name} has no port {endpoint['port']!r}"
            workload = next(d for d in docs if d["kind"] in ("Deployment", "DaemonSet")
                            and d["metadata"]["name"] == name)
            annotations = workload["spec"]["template"]["metadata"]["annotations"]
            container_ports = {p["name"]: p["containerPort"] for p in main_container(workload)["ports"]}
            assert str(container_ports[port["targetPort"]]) == annotations["prometheus.io/port"], (
                f"{name}: the ServiceMonitor scrapes port {port['targetPort']}, the plain config port "
                f"{annotations['prometheus.io/port']}")
            assert endpoint["path"] == annotations["prometheus.io/path"]
    assert set(scraped) == set(SERVICES), f"scraped {sorted(scraped)}, the services are {sorted(SERVICES)}"
    assert scraped["alnair-exporter"] == "alnair-exporter"
    exporter_monitor = next(m for m in monitors if m["metadata"]["name"] == "alnair-exporter")
    assert exporter_monitor["spec"]["endpoints"][0]["interval"] == "5s"
    assert find(docs, "Service", "alnair-exporter")["spec"]["clusterIP"] == "None"
