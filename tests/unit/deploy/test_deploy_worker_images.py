"""The training-worker images (images/worker*), checked as far as a machine without Docker can.

A TrainingJob's image runs its workers (``torchrun ... --no-python <command>``) and its
rendezvous pod (``python3 -c <rendezvous_host.py>``). What is checked: each Dockerfile is the
generator's current output; it builds FROM the pinned PyTorch base, whose torch is the one in
uv.lock (the version the rendezvous host and WORKER_ENV are tested with); the shipped stage
runs as a numeric non-root user, sets WORKER_ENV and checks python3 and torchrun at build
time; of the repository only alnair_trainer is copied in (no bus client, no bus credentials); the MPI
variant installs Open MPI and mpi4py and runs as non-root on TCP; the RDMA variant is the MPI
one plus rdma-core and libibverbs with its providers. No image is built here.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shlex
import tomllib
from types import ModuleType

import pytest
from deploy_render import REPO
from test_deploy_dockerfiles import build_args, copied_sources, instructions, stages

from alnair_lifecycle import WORKER_ENV

IMAGES = REPO / "images"
WORKERS = ("worker", "worker-mpi", "worker-rdma")


def generator() -> ModuleType:
    """scripts/gen-dockerfiles as a module (it has no .py suffix)."""
    path = REPO / "scripts" / "gen-dockerfiles"
    loader = importlib.machinery.SourceFileLoader("gen_dockerfiles", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def runtime(name: str) -> list[tuple[str, str]]:
    final = stages(IMAGES / name / "Dockerfile")[-1]
    assert final[0][1].endswith("AS runtime"), f"images/{name}: the last stage (the default build) must be runtime"
    return final


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    """The environment a stage ends with (a later ENV of a name wins, as in Docker)."""
    env: dict[str, str] = {}
    for word, args in stage:
        if word == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(args))
    return env


def apt_packages(stage: list[tuple[str, str]]) -> set[str]:
    packages: set[str] = set()
    for word, args in stage:
        for command in args.split("&&") if word == "RUN" else ():
            argv = shlex.split(command)
            if argv[:2] == ["apt-get", "install"]:
                packages.update(a for a in argv[2:] if not a.startswith("-"))
    return packages


def runs(stage: list[tuple[str, str]]) -> list[str]:
    return [args for word, args in stage if word == "RUN"]


def checks_as_user(stage: list[tuple[str, str]]) -> str:
    """The RUN steps after the stage's last USER: what the build checks as the image's user."""
    last_user = max(i for i, (word, _) in enumerate(stage) if word == "USER")
    return " && ".join(args for word, args in stage[last_user:] if word == "RUN")


def test_worker_images_are_the_generators_current_output() -> None:
    gen = generator()
    assert set(gen.WORKER_IMAGES) == set(WORKERS), "a worker image was added or removed: update WORKERS here"
    for path, text in gen.worker_files():
        assert path.is_file() and path.read_text() == text, (
            f"{path.relative_to(REPO)} is stale: run scripts/gen-dockerfiles")
    # The generator reads WORKER_ENV from the source without importing it: it must read what the adapters use.
    assert gen.worker_env() == WORKER_ENV


@pytest.mark.parametrize("name", WORKERS)
def test_worker_image_builds_from_the_pinned_pytorch_of_the_lock(name: str) -> None:
    dockerfile = IMAGES / name / "Dockerfile"
    args = build_args(dockerfile)
    assert set(args) == {"PYTORCH_IMAGE"}, f"{dockerfile}: unexpected build arguments {args}"
    base = args["PYTORCH_IMAGE"]
    pinned = r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda\d+\.\d+-cudnn\d+-runtime(@sha256:[0-9a-f]{64})?"
    found = re.fullmatch(pinned, base)
    assert found, f"{dockerfile}: PYTORCH_IMAGE={base} is not a pinned pytorch/pytorch runtime tag"
    assert all(s[0][1].startswith("${PYTORCH_IMAGE} ") for s in stages(dockerfile)), (
        f"{dockerfile}: every stage must build FROM ${{PYTORCH_IMAGE}}, so one build argument moves them all")
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    (torch,) = [p["version"] for p in lock["package"] if p["name"] == "torch"]
    assert found[1] == torch, (
        f"{dockerfile}: the base has torch {found[1]}, uv.lock {torch} (what rendezvous_host.py and the "
        "WORKER_ENV workaround are tested with): move PYTORCH_IMAGE in scripts/gen-dockerfiles")


@pytest.mark.parametrize("name", WORKERS)
def test_worker_image_runs_as_non_root_with_worker_env_and_torchrun(name: str) -> None:
    final = runtime(name)
    users = [a for w, a in final if w == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), (
        f"images/{name}: the shipped stage must end as a numeric non-root user, has USER {users}")
    assert final[-1][0] == "RUN" and checks_as_user(final), f"images/{name}: the build must end with its checks"
    env = env_of(final)
    for key, value in WORKER_ENV.items():
        assert env.get(key) == value, f"images/{name}: {key}={env.get(key)!r}, WORKER_ENV has {value!r}"
    assert not [a for _, a in instructions(IMAGES / name / "Dockerfile") if "OMPI_ALLOW_RUN_AS_ROOT" in a], (
        f"images/{name}: a non-root image needs no OMPI_ALLOW_RUN_AS_ROOT")
    checks = checks_as_user(final)
    # One name per `command -v`: with several, dash and bash exit 0 when only the first is found.
    for needed in ("command -v python3 &&", "command -v torchrun &&", "torchrun --help",
                   "torch.distributed.elastic.rendezvous"):
        assert needed in checks, f"images/{name}: the build does not check {needed!r} as the image's user"
    assert [a for w, a in final if w == "WORKDIR"] == ["/workspace"], f"images/{name}: WORKDIR should be /workspace"
    labels = " ".join(a for w, a in final if w == "LABEL")
    assert f'org.opencontainers.image.title="alnair-{name}"' in labels, f"images/{name}: OCI title label missing"
    assert "org.opencontainers.image.base.name=" in labels, f"images/{name}: OCI base.name label missing"


@pytest.mark.parametrize("name", WORKERS)
def test_worker_image_takes_only_the_trainer_library_from_the_repository(name: str) -> None:
    """Workers need no bus client and no bus credentials: the one thing copied is alnair_trainer
    (torch-inprocess's trainer, which imports no Alnair package), and the context is that alone."""
    dockerfile = IMAGES / name / "Dockerfile"
    trainer = "libs/trainer/src/alnair_trainer"
    copied = copied_sources(dockerfile)
    assert copied == {trainer}, f"{dockerfile}: copies {copied} from the context"
    assert (REPO / trainer / "__init__.py").is_file()
    for word, args in instructions(dockerfile):
        assert word != "ADD", f"{dockerfile}: ADD {args}"
        assert not re.search(r"\b(uv|pip)\b.*\balnair", args), f"{dockerfile}: installs an Alnair package: {args}"
    ignore = (IMAGES / name / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore and [line for line in ignore if line.startswith("!")] == [f"!{trainer}"], (
        f"images/{name}: the build context must be the trainer library alone")
    assert "import alnair_trainer" in checks_as_user(runtime(name)), f"images/{name}: alnair_trainer not checked"


@pytest.mark.parametrize("name", ["worker-mpi", "worker-rdma"])
def test_mpi_variants_install_open_mpi_and_mpi4py_for_tcp_as_non_root(name: str) -> None:
    dockerfile = IMAGES / name / "Dockerfile"
    final = runtime(name)
    assert "openmpi-bin" in apt_packages(final), f"{dockerfile}: Open MPI is not installed from the distribution"
    (build,) = [s for s in stages(dockerfile) if s[0][1].endswith("AS mpi4py")]
    assert {"libopenmpi-dev", "build-essential"} <= apt_packages(build)
    (wheel,) = [r for r in runs(build) if "pip wheel" in r]
    assert re.search(r"--no-binary=mpi4py .*mpi4py==\d+\.\d+\.\d+$", wheel), f"{dockerfile}: mpi4py unpinned: {wheel}"
    (install,) = [r for r in runs(final) if "pip install" in r]
    assert "from=mpi4py" in install and "--no-index" in install, f"{dockerfile}: mpi4py not from the built wheel"
    assert not {"build-essential", "libopenmpi-dev"} & apt_packages(final), f"{dockerfile}: compilers shipped"
    env = env_of(stages(dockerfile)[-1])
    assert "tcp" in env["OMPI_MCA_btl"].split(","), f"{dockerfile}: the TCP BTL is not enabled: {env}"
    assert env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none", "CMA needs ptrace, which containers lack"
    assert "mpirun --oversubscribe -np 2 --mca pml ob1 python3 -m mpi4py.bench helloworld" in checks_as_user(final)


def test_rdma_variant_is_the_mpi_one_plus_rdma_core_and_libibverbs() -> None:
    mpi, rdma = runtime("worker-mpi"), runtime("worker-rdma")
    # Every step of the MPI image but its labels and checks, in the same order (so a builder
    # reuses the layers).
    steps = iter(rdma)
    assert all(ins in steps for ins in mpi[:-1] if ins[0] != "LABEL"), (
        "images/worker-rdma must hold images/worker-mpi's steps, in order")
    assert stages(IMAGES / "worker-rdma" / "Dockerfile")[0] == stages(IMAGES / "worker-mpi" / "Dockerfile")[0]
    assert {"rdma-core", "ibverbs-providers", "libibverbs1"} <= apt_packages(rdma) - apt_packages(mpi)
    assert env_of(rdma)["OMPI_MCA_pml"] == "ucx" and env_of(mpi)["OMPI_MCA_pml"] == "ob1"
    assert "/etc/libibverbs.d/mlx5.driver" in checks_as_user(rdma), "the build must check the verbs providers"
