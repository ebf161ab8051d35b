"""The Dataset CRD in the bundle is ``alnair_kube_bridge.dataset_crd()`` rendered.

The YAML must not be edited by hand: ``python tests/unit/deploy/test_deploy_dataset_crd.py``
writes it again. The bundle installs it (k8s/base/kustomization.yaml), and the test plane
applies every ``k8s/**/crds/*.yaml``; tests/integration/kube_bridge/test_kb_datasets.py checks
what the apiserver refuses with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from alnair_kube_bridge import dataset_crd

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "k8s" / "base" / "crds" / "datasets.alnair.centaurus.io.yaml"
HEADER = """\
# Generated from alnair_kube_bridge.dataset_crd(): do not edit. Regenerate with
#   python tests/unit/deploy/test_deploy_dataset_crd.py
# Dataset: a data set the cache hydrator keeps in the cache tier. kube-bridge sends it to
# the hydrator and writes the hydrator's status into it (services/kube_bridge).
"""


def render() -> str:
    return HEADER + yaml.safe_dump(dataset_crd(), sort_keys=False, width=100)


def test_the_dataset_manifest_is_the_generated_crd() -> None:
    assert MANIFEST.read_text() == render(), f"stale: run python {Path(__file__).relative_to(REPO)}"


def test_the_bundle_installs_it() -> None:
    kustomization = yaml.safe_load((REPO / "k8s" / "base" / "kustomization.yaml").read_text())
    assert f"crds/{MANIFEST.name}" in kustomization["resources"]


def test_status_has_what_kube_bridge_writes_and_kubectl_shows() -> None:
    [version] = dataset_crd()["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"phase", "reason", "message", "totalBytes", "cachedBytes", "filesTotal",
            "filesCached", "dedupSavedBytes", "progress", "cached", "observedGeneration",
            "observedAt", "requestId", "conditions"} <= status.keys()
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == ["Phase", "Cached", "Age"]


if __name__ == "__main__":
    MANIFEST.write_text(render())
    sys.stdout.write(f"wrote {MANIFEST.relative_to(REPO)}\n")
