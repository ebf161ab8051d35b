"""What the deployment tests share: rendering the kustomize overlays and reading the result.

Rendering uses the pinned kubectl of the test plane (``kubectl kustomize``, the kustomize
built into kubectl), so the manifests are built exactly as ``kubectl apply -k`` would.
"""

from __future__ import annotations

import functools
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from alnair_common.testing.testbin import locate

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "k8s"
OVERLAYS = ("dev", "prod")
NAMESPACE = "alnair-system"
HEALTH_PORT = 8080

# Workload name -> services/<dir> of the Alnair services deployed on Kubernetes
# (local-agent is the local mode's adapter and has no manifest).
SERVICES = {
    "alnair-kube-bridge": "kube_bridge",
    "alnair-device-plugin": "device_plugin",
    "alnair-exporter": "exporter",
    "alnair-scheduler": "scheduler",
    "alnair-profiler": "profiler",
    "alnair-elastic-job": "elastic_job",
    "alnair-cache-hydrator": "cache_hydrator",
}
BRAINS = ("alnair-scheduler", "alnair-profiler", "alnair-elastic-job", "alnair-cache-hydrator")
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")


def kubectl() -> Path:
    return locate().path("kubectl")


def kustomize_build(directory: Path) -> str:
    """``kubectl kustomize <directory>``; a failure names the directory and kustomize's reason."""
    done = subprocess.run([str(kubectl()), "kustomize", str(directory)], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"kustomize build {directory} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    """The documents of ``k8s/overlays/<overlay>``, cached per test session (read-only use)."""
    return tuple(d for d in yaml.safe_load_all(kustomize_build(K8S / "overlays" / overlay)) if d)


def find(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def workloads(docs: tuple[dict[str, Any], ...]) -> Iterator[dict[str, Any]]:
    return (d for d in docs if d["kind"] in WORKLOAD_KINDS)


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def main_container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: expected one container"
    return containers[0]


@dataclass(frozen=True)
class ServicePackage:
    """A service's Python package as its pyproject declares it."""

    directory: Path
    name: str
    script: str
    entrypoint: str
    dependencies: tuple[str, ...]

    @property
    def module(self) -> str:
        return self.entrypoint.split(":")[0].split(".")[0]


def service_package(directory: Path) -> ServicePackage:
    project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
    (script, entrypoint), = project["scripts"].items()
    return ServicePackage(directory, project["name"], script, entrypoint, tuple(project.get("dependencies", [])))


def requirement_name(requirement: str) -> str:
    for stop in "<>=!~[; ":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower()


@functools.cache
def workspace_members() -> dict[str, Path]:
    """Distribution name -> directory (relative to the repo) of every uv workspace member."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]["members"]
    members = {}
    for pattern in globs:
        for directory in sorted(REPO.glob(pattern)):
            if (directory / "pyproject.toml").is_file():
                project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
                members[project["name"]] = directory.relative_to(REPO)
    return members


def workspace_closure(distribution: str) -> set[str]:
    """The workspace members ``distribution`` needs at run time, itself included."""
    members = workspace_members()
    needed, todo = set(), [distribution]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        project = tomllib.loads((REPO / members[name] / "pyproject.toml").read_text())["project"]
        todo += [d for d in map(requirement_name, project.get("dependencies", [])) if d in members]
    return needed
