"""The Grafana dashboards are generated from k8s/base/grafana/dashboards.py and provisioned
against the data source that datasources.yaml defines. (That every query names exported
metrics and runs in a real Prometheus is tests/integration/deploy/test_deploy_dashboard_queries.py.)
"""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType

import yaml
from deploy_render import K8S

GRAFANA = K8S / "base" / "grafana"


def dashboards_source() -> ModuleType:
    spec = importlib.util.spec_from_file_location("alnair_dashboards_source", GRAFANA / "dashboards.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_dashboards_are_what_the_source_generates() -> None:
    rendered = dashboards_source().render()
    committed = {p.name: p.read_text() for p in (GRAFANA / "dashboards").glob("*.json")}
    assert set(committed) == set(rendered), (
        f"dashboards/ holds {sorted(committed)}, the source makes {sorted(rendered)}")
    stale = [name for name in rendered if committed[name] != rendered[name]]
    assert not stale, f"{stale} differ from the source: run `python k8s/base/grafana/dashboards.py` and commit"


def test_every_panel_queries_the_provisioned_prometheus() -> None:
    (source,) = yaml.safe_load((GRAFANA / "datasources.yaml").read_text())["datasources"]
    uids = set()
    for path in (GRAFANA / "dashboards").glob("*.json"):
        board = json.loads(path.read_text())
        uids.add(board["uid"])
        assert board["panels"], f"{path.name} has no panels"
        for panel in board["panels"]:
            assert panel["targets"], f"{path.name}: panel {panel['title']!r} has no query"
            for target in [panel, *panel["targets"]]:
                assert target["datasource"] == {"type": source["type"], "uid": source["uid"]}, (
                    f"{path.name}: {panel['title']!r} uses {target['datasource']}, provisioned is {source['uid']}")
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids), f"{path.name}: duplicate panel ids"
    assert len(uids) == len(list((GRAFANA / "dashboards").glob("*.json"))) == 4, "dashboard uids must differ"
    provider = yaml.safe_load((GRAFANA / "dashboards.yaml").read_text())["providers"][0]
    grafana = yaml.safe_load_all((GRAFANA / "grafana.yaml").read_text())
    deployment = next(d for d in grafana if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["dashboards"] == provider["options"]["path"], "Grafana reads dashboards where they are not mounted"
