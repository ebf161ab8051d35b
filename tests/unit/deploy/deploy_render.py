"""What the deployment tests share: rendering the kustomize overlays and reading the result.

Rendering uses the pinned kubectl of the test plane (``kubectl kustomize``, the kustomize
built into kubectl), so the manifests are built exactly as ``kubectl apply -k`` would. The
dev overlay includes the bus's credentials, made per checkout by ``scripts/bus-credentials``
(the Tiltfile runs it): the tests render a copy of ``k8s/`` with credentials of their own,
made by the same script, and never read or write the checkout's.
"""

from __future__ import annotations

import atexit
import base64
import functools
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from alnair_common.testing.testbin import locate

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "k8s"
BUS_CREDENTIALS_SCRIPT = REPO / "scripts" / "bus-credentials"
DEV_CREDENTIALS = "bus-credentials"  # k8s/overlays/dev/<this>, written by the script
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
    "alnair-admission-webhook": "admission_webhook",
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


def generate_bus_credentials(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``scripts/bus-credentials out *args``, as an operator runs it; a failure is an AssertionError."""
    done = subprocess.run([sys.executable, str(BUS_CREDENTIALS_SCRIPT), str(out), *args],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"scripts/bus-credentials {out} {' '.join(args)} failed "
                             f"(exit {done.returncode}): {done.stderr.strip()}")
    return done


@functools.cache
def bundle_tree() -> Path:
    """A copy of ``k8s/`` whose dev overlay has bus credentials of its own (removed at exit)."""
    root = Path(tempfile.mkdtemp(prefix="alnair-k8s-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(K8S, root / "k8s", ignore=shutil.ignore_patterns(DEV_CREDENTIALS))
    generate_bus_credentials(root / "k8s" / "overlays" / "dev" / DEV_CREDENTIALS, "--namespace", NAMESPACE)
    return root / "k8s"


def dev_bus_credentials() -> Path:
    """The generator's output the rendered dev overlay was built from (seeds, CA, users)."""
    return bundle_tree() / "overlays" / "dev" / DEV_CREDENTIALS


def load_docs(text: str) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.safe_load_all(text) if d)


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    """The documents of ``k8s/overlays/<overlay>``, cached per test session (read-only use)."""
    return load_docs(kustomize_build(bundle_tree() / "overlays" / overlay))


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
class PodFiles:
    """A container's volumes written under ``root`` as the kubelet writes them in the pod."""

    root: Path
    mounts: tuple[str, ...]  # the container's mount paths, longest first

    def local(self, path: str) -> str:
        """Where the pod path ``path`` is here (unchanged if no volume holds it)."""
        for mount in self.mounts:
            if path == mount or path.startswith(mount + "/"):
                return str(self.root) + path
        return path


def _volume_files(volume: dict[str, Any], docs: tuple[dict[str, Any], ...]) -> list[tuple[str, bytes, int]]:
    """(path in the volume, content, mode) of each file of a ConfigMap, Secret or projected volume."""
    def source_files(kind: str, name: str, items: list[dict[str, Any]] | None, mode: int) -> list:
        data = find(docs, kind, name).get("data", {})
        values = {k: base64.b64decode(v) if kind == "Secret" else v.encode() for k, v in data.items()}
        chosen = items or [{"key": k, "path": k} for k in values]
        return [(item["path"], values[item["key"]], item.get("mode", mode)) for item in chosen]

    if "configMap" in volume:
        source = volume["configMap"]
        return source_files("ConfigMap", source["name"], source.get("items"), source.get("defaultMode", 0o644))
    if "secret" in volume:
        source = volume["secret"]
        return source_files("Secret", source["secretName"], source.get("items"), source.get("defaultMode", 0o644))
    if "projected" in volume:
        mode = volume["projected"].get("defaultMode", 0o644)
        files = []
        for source in volume["projected"]["sources"]:
            (kind, ref), = source.items()
            files += source_files({"configMap": "ConfigMap", "secret": "Secret"}[kind], ref["name"],
                                  ref.get("items"), mode)
        return files
    return []  # emptyDir, hostPath, a claim: an empty directory stands in


def materialize(workload: dict[str, Any], docs: tuple[dict[str, Any], ...], root: Path) -> PodFiles:
    """Write the main container's volumes under ``root`` with their modes, as the pod sees them."""
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    mounts = main_container(workload).get("volumeMounts", [])
    for mount in mounts:
        directory = root / PurePosixPath(mount["mountPath"]).relative_to("/")
        directory.mkdir(parents=True, exist_ok=True)
        for path, content, mode in _volume_files(volumes.get(mount["name"], {}), docs):
            target = directory / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(mode)
    return PodFiles(root, tuple(sorted((m["mountPath"] for m in mounts), key=len, reverse=True)))


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
