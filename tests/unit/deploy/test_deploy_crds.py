"""The TrainingJob CRD in the bundle is ``alnair_elastic_job.training_job_crd()`` rendered.

The schema is built from the controller's own limits, so the YAML must not be edited by
hand: ``python tests/unit/deploy/test_deploy_crds.py`` writes it again. The bundle installs
it (k8s/base/kustomization.yaml), and the test plane applies every ``k8s/**/crds/*.yaml``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

import alnair_elastic_job as ej

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "k8s" / "base" / "crds" / "trainingjobs.alnair.centaurus.io.yaml"
HEADER = """\
# Generated from alnair_elastic_job.training_job_crd(): do not edit. Regenerate with
#   python tests/unit/deploy/test_deploy_crds.py
# TrainingJob: a training job run by the elastic-job controller. kube-bridge submits each
# one to the controller and writes the job's state into its status (services/kube_bridge).
"""


def render() -> str:
    return HEADER + yaml.safe_dump(ej.training_job_crd(), sort_keys=False, width=100)


def test_the_trainingjob_manifest_is_the_generated_crd() -> None:
    assert MANIFEST.read_text() == render(), f"stale: run python {Path(__file__).relative_to(REPO)}"
    assert yaml.safe_load(MANIFEST.read_text()) == ej.training_job_crd()


def test_the_bundle_installs_it() -> None:
    kustomization = yaml.safe_load((REPO / "k8s" / "base" / "kustomization.yaml").read_text())
    assert f"crds/{MANIFEST.name}" in kustomization["resources"]


def test_status_has_what_kube_bridge_writes_and_kubectl_shows() -> None:
    [version] = ej.training_job_crd()["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"phase", "reason", "message", "replicas", "targetReplicas", "restarts", "goodput",
            "observedGeneration", "stateGeneration", "startTime", "lastTransitionTime",
            "conditions"} <= status.keys()
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == ["Phase", "Replicas", "Restarts", "Goodput", "Age"]


if __name__ == "__main__":
    MANIFEST.write_text(render())
    sys.stdout.write(f"wrote {MANIFEST.relative_to(REPO)}\n")
