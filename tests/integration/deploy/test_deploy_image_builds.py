"""The Dockerfiles' build steps, replayed without a Docker engine.

For each service image: a scratch build context holding exactly what the Dockerfile
COPYs, the very `uv sync` command of its RUN step (offline, from uv's cache, into a fresh
environment), then the console script the ENTRYPOINT names must import and validate its
settings (``--help`` is not a thing for services, so a bad setting is used: the service
must refuse it with exit status 2 and name it, which proves its whole import graph loads).

For the interceptor image: the build stage's `make` command in a copy of only what the
Dockerfile copies, and the library it produces is the one the final stage ships.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_render import REPO, service_package
from test_deploy_dockerfiles import copied_sources, instructions

SERVICE_DIRS = sorted(p.parent for p in (REPO / "services").glob("*/pyproject.toml"))


def uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    assert Path(found).is_file(), "uv not found on PATH (install uv: it builds the images and the dev environment)"
    return found


def stage_context(dockerfile: Path, context_root: Path, destination: Path) -> None:
    for word, args in instructions(dockerfile):
        if word == "COPY" and "--from" not in args:
            *sources, target = shlex.split(args)
            for source in sources:
                origin = context_root / source
                place = destination / (Path(source).name if target in ("./", ".") else target)
                if origin.is_dir():
                    shutil.copytree(origin, place, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
                else:
                    place.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, place)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("service_dir", SERVICE_DIRS, ids=lambda p: p.name)
def test_service_image_installs_from_only_what_it_copies(service_dir: Path, tmp_path: Path) -> None:
    dockerfile = service_dir / "Dockerfile"
    package = service_package(service_dir)
    context = tmp_path / "src"
    context.mkdir()
    stage_context(dockerfile, REPO, context)
    assert sorted(p.name for p in context.iterdir()) == sorted(
        {Path(s).parts[0] for s in copied_sources(dockerfile)}), "the staged context differs from the COPY lines"
    sync = next(a for w, a in instructions(dockerfile) if w == "RUN" and "uv sync" in a)
    command = re.search(r"uv sync.*", sync)
    assert command is not None
    argv = shlex.split(command.group(0))
    venv = tmp_path / "venv"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV", "ALNAIR_"))},
           "UV_PROJECT_ENVIRONMENT": str(venv), "UV_OFFLINE": "1", "UV_LINK_MODE": "copy",
           "UV_PYTHON_DOWNLOADS": "never"}
    done = subprocess.run([uv(), *argv[1:]], cwd=context, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(argv)} failed in the image's context:\n{done.stderr}"
    script = venv / "bin" / package.script
    assert script.is_file(), f"the image would have no {package.script} (ENTRYPOINT)"
    started = subprocess.run([str(script)], env={**env, "ALNAIR_HEALTH_PORT": "not-a-port"},
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 2 and "ALNAIR_HEALTH_PORT" in started.stderr, (
        f"{package.script} in the image's environment did not start up to settings validation:\n{started.stderr}")
    installed = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
                                "print('\\n'.join(sorted(d.metadata['Name'] for d in m.distributions())))"],
                               capture_output=True, text=True, timeout=60).stdout.split()
    assert not {"pytest", "ruff", "hypothesis"} & set(installed), "development dependencies in the image"


def test_interceptor_image_build_stage_produces_the_shipped_library(tmp_path: Path) -> None:
    native = REPO / "native" / "cuda_intercept"
    dockerfile = native / "Dockerfile"
    context = tmp_path / "src"
    context.mkdir()
    stage_context(dockerfile, native, context)
    run = next(a for w, a in instructions(dockerfile) if w == "RUN")
    argv = shlex.split(run)
    out = tmp_path / "out"
    argv = [f"BUILD_DIR={out}" if a.startswith("BUILD_DIR=") else a for a in argv]
    done = subprocess.run(argv, cwd=context, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{run} failed on only what the Dockerfile copies:\n{done.stdout}\n{done.stderr}"
    shipped = next(a for w, a in instructions(dockerfile) if w == "COPY" and "--from=build" in a)
    built = out / Path(shlex.split(shipped)[1]).name
    assert built.is_file() and built.stat().st_size > 0, f"{built} was not produced"
    exports = subprocess.run(["nm", "-D", "--defined-only", str(built)], capture_output=True, text=True).stdout
    assert re.search(r" T cuMemAlloc_v2$", exports, re.M), "the built library does not interpose cuMemAlloc_v2"
