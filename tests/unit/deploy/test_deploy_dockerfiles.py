"""The Dockerfiles, checked as far as a machine without a Docker engine can.

What is checked: each service image copies exactly the workspace packages its pyproject
needs (transitively) and installs its own distribution from the frozen lock; the bases are
pinned; the shipped stage runs as a non-root numeric user and starts the service's console
script; the interceptor image builds with the make targets CI runs. The install itself and
the interceptor build are replayed for real in tests/integration/deploy.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from deploy_render import REPO, service_package, workspace_closure, workspace_members

SERVICE_DIRS = sorted(p.parent for p in (REPO / "services").glob("*/pyproject.toml"))
INTERCEPTOR = REPO / "native" / "cuda_intercept"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def stages(dockerfile: Path) -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for ins in instructions(dockerfile):
        if ins[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def build_args(dockerfile: Path) -> dict[str, str]:
    return dict(a.split("=", 1) for w, a in instructions(dockerfile) if w == "ARG" and "=" in a)


def copied_sources(dockerfile: Path) -> set[str]:
    """Context paths copied by plain COPY (not --from) into the build stage."""
    copied = set()
    for word, args in instructions(dockerfile):
        if word == "COPY" and "--from" not in args:
            *sources, _dest = shlex.split(args)
            copied.update(s.rstrip("/") for s in sources if not s.startswith("--"))
    return copied


@pytest.mark.parametrize("service_dir", SERVICE_DIRS, ids=lambda p: p.name)
def test_each_service_has_a_dockerfile_copying_exactly_its_workspace_dependencies(service_dir: Path) -> None:
    dockerfile = service_dir / "Dockerfile"
    assert dockerfile.is_file(), f"{service_dir.name}: no Dockerfile (write services/{service_dir.name}/Dockerfile)"
    package = service_package(service_dir)
    members = workspace_members()
    needed = {members[name].as_posix() for name in workspace_closure(package.name)}
    copied = copied_sources(dockerfile) - {"pyproject.toml", "uv.lock", "."}
    assert copied == needed, (
        f"{dockerfile.relative_to(REPO)} copies {sorted(copied)} but {package.name} needs the workspace "
        f"packages {sorted(needed)} (from its pyproject, transitively): run scripts/gen-dockerfiles")
    assert {"pyproject.toml", "uv.lock"} <= copied_sources(dockerfile), "the lock and workspace root must be copied"
    runs = [a for w, a in instructions(dockerfile) if w == "RUN" and "uv sync" in a]
    assert len(runs) == 1, f"{dockerfile}: expected one `uv sync` step, found {len(runs)}"
    sync = runs[0]
    for flag in ("--frozen", "--no-dev", "--no-editable", f"--package {package.name}"):
        assert flag in sync, f"{dockerfile}: `uv sync` lacks {flag!r}: {sync}"


@pytest.mark.parametrize("service_dir", SERVICE_DIRS, ids=lambda p: p.name)
def test_service_image_is_pinned_non_root_and_starts_the_service(service_dir: Path) -> None:
    dockerfile = service_dir / "Dockerfile"
    package = service_package(service_dir)
    for name, image in build_args(dockerfile).items():
        if name.endswith("_IMAGE"):
            assert re.search(r":\d+\.\d+\.\d+", image) or "@sha256:" in image, (
                f"{dockerfile}: {name}={image} is not pinned to a full version or digest")
    final = stages(dockerfile)[-1]
    assert final[0][1].endswith("AS runtime"), f"{dockerfile}: the last stage (the default build) must be runtime"
    base_name = final[0][1].split()[0]
    base = next(s for s in stages(dockerfile) if s[0][1].endswith(f"AS {base_name}"))
    users = [a for w, a in base if w == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), (
        f"{dockerfile}: the shipped stage must run as a numeric non-root user, has USER {users}")
    entrypoints = [a for w, a in base if w == "ENTRYPOINT"]
    assert entrypoints == [f'["{package.script}"]'], (
        f"{dockerfile}: ENTRYPOINT {entrypoints} should be the console script {package.script!r} of {package.name}")
    dev = next(s for s in stages(dockerfile) if s[0][1].endswith("AS dev"))
    chown = next(a for w, a in dev if w == "RUN")
    assert f"chown -R 10001:10001 /opt/alnair/venv/lib/python3.12/site-packages/{package.module} " in chown, (
        f"{dockerfile}: the dev stage must hand {package.module} to the app user for Tilt's live update")
    # Tilt's restart_process extension touches and rewrites /.restart-proc as the image's user.
    assert "touch /.restart-proc && chown 10001:10001 /.restart-proc" in chown, dockerfile
    python = build_args(dockerfile)["PYTHON_IMAGE"].split(":")[1]
    assert python.startswith("3.12."), f"{dockerfile}: site-packages path assumes Python 3.12, base is {python}"


def test_interceptor_image_builds_with_the_targets_ci_runs() -> None:
    dockerfile = INTERCEPTOR / "Dockerfile"
    runs = [a for w, a in instructions(dockerfile) if w == "RUN"]
    assert len(runs) == 1, f"{dockerfile}: expected one build step, found {runs}"
    argv = shlex.split(runs[0])
    assert argv[0] == "make", f"{dockerfile}: the build step must be make, is {runs[0]!r}"
    targets = [a for a in argv[1:] if "=" not in a]
    variables = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
    # tests/integration/interceptor/test_native.py builds `make lib check-exports` (the CI build).
    ci_source = (REPO / "tests" / "integration" / "interceptor" / "test_native.py").read_text()
    assert 'make("lib", "check-exports")' in ci_source, "CI's interceptor build changed: update the Dockerfile"
    assert targets == ["lib", "check-exports"], f"{dockerfile}: builds {targets}, CI builds ['lib', 'check-exports']"
    assert set(variables) == {"BUILD_DIR"}, f"{dockerfile}: unexpected make variables {variables}"
    makefile = (INTERCEPTOR / "Makefile").read_text()
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"Makefile has no target {target!r}"
    produced = f"{variables['BUILD_DIR']}/libalnair_cuda.so"
    copies = [a for w, a in instructions(dockerfile) if w == "COPY" and "--from=build" in a]
    assert copies and shlex.split(copies[0])[1] == produced, (
        f"{dockerfile}: the runtime stage must copy {produced}, copies {copies}")
    # The build context is the interceptor directory: everything the Makefile reads must be copied.
    copied = copied_sources(dockerfile)
    for needed in ("Makefile", "libalnair_cuda.map", "include", "src"):
        assert needed in copied, f"{dockerfile}: does not copy {needed!r}, which `make lib` reads"
    entry = next(a for w, a in instructions(dockerfile) if w == "ENTRYPOINT")
    assert "/host/opt/alnair/lib/libalnair_cuda.so" in entry and "mv -f" in entry, (
        "the init container must install the library on the host by atomic rename")


def test_dockerfiles_and_their_ignore_files_are_generated_from_the_pyprojects() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-dockerfiles"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for service_dir in SERVICE_DIRS:
        ignore = (service_dir / "Dockerfile.dockerignore").read_text().splitlines()
        allowed = {line[1:] for line in ignore if line.startswith("!")}
        copied = copied_sources(service_dir / "Dockerfile")
        assert allowed == copied, f"{service_dir.name}: the build context {sorted(allowed)} != COPY {sorted(copied)}"
    ignore = (INTERCEPTOR / "Dockerfile.dockerignore").read_text().splitlines()
    assert {line[1:] for line in ignore if line.startswith("!")} == copied_sources(INTERCEPTOR / "Dockerfile")
