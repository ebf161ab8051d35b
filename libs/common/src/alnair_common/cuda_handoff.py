"""Hand a workload's GPU share to the CUDA interceptor: the writer side of its contract.

The scheduler picks a card and the amounts; the device plugin (a pod's container) and the
local agent (a local process) hand that decision to ``libalnair_cuda.so``
(``native/cuda_intercept``) through this module: a ``limits`` file in the workload's
workspace and a few environment variables. The interceptor reads them in ``ci_limits.c``;
:mod:`alnair_common.cuda_region` reads back the region it keeps in the workspace.

The tenant is hostile: it controls its environment and any file it can write. So:

* **Container mode** (the device plugin, :func:`prepare_container_workspace`): the limits
  file is mounted read-only at :data:`FIXED_LIMITS_PATH`, a path compiled into the
  interceptor; it also names the workspace (``workspace = ...``), so the tenant's
  ``ALNAIR_WORKSPACE`` is ignored. The workspace itself is mounted read-only with the
  region file (created here, empty) bind-mounted read-write over it: the tenant can write
  its region but not delete, replace or add anything. The library is also injected through
  the container's ``/etc/ld.so.preload`` (:func:`render_ld_so_preload`), so dropping
  ``LD_PRELOAD`` does not unload it.
* **Local mode** (the local agent): the workload runs as the platform's own user, which can
  rewrite anything the agent writes. ``ALNAIR_WORKSPACE`` names the workspace (mode
  :data:`LOCAL_WORKSPACE_MODE`, the user's only); the limits hold against mistakes, not
  against that user (``native/cuda_intercept/README.md``, "What a limit guarantees").
* In both, the environment's limit variables can only tighten the file's limits.
* **MPS mode** (``mps_pipe_directory``): the card runs an MPS control daemon (the launcher's)
  and the interceptor, from the limits file, sets the workload's MPS client settings itself:
  the pipe directory, its compute share as the active-thread percentage (an SM partition),
  its memory limit as the pinned-memory limit. None is handed over as a variable: a tenant's
  own are overwritten.

The invariants both adapters rely on:

* An amount of 0 means "not asked for, no limit": the key is left out of the file and the
  variable out of the environment. The interceptor reads a written ``memory_bytes = 0`` as
  "refuse every allocation" and ``compute_percent = 0`` as invalid (the strictest 1 %).
* The limits file is replaced atomically and left read-only.
* Nothing a tenant chose can add a line to the file: a workload id or GPU UUID holding a
  line break or a ``#`` is refused with :class:`~alnair_common.errors.PermanentError`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import cuda_region
from .errors import PermanentError

__all__ = [
    "ENV_COMPUTE_PERCENT",
    "ENV_MEMORY_BYTES",
    "ENV_PRELOAD",
    "ENV_VARIABLES",
    "ENV_VISIBLE_DEVICES",
    "ENV_WORKLOAD_ID",
    "ENV_WORKSPACE",
    "FIXED_LIMITS_PATH",
    "GIB",
    "LD_SO_PRELOAD_FILE",
    "LD_SO_PRELOAD_PATH",
    "LIMITS_FILE",
    "LIMITS_MODE",
    "LOCAL_WORKSPACE_MODE",
    "REGION_FILE",
    "REGION_MODE",
    "WORKSPACE_MODE",
    "WORKSPACE_ROOT_MODE",
    "CudaShare",
    "create_region",
    "interceptor_env",
    "prepare_container_workspace",
    "render_ld_so_preload",
    "render_limits",
    "write_limits",
]

ENV_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
ENV_PRELOAD = "LD_PRELOAD"
ENV_WORKSPACE = "ALNAIR_WORKSPACE"
ENV_WORKLOAD_ID = "ALNAIR_WORKLOAD_ID"
ENV_MEMORY_BYTES = "ALNAIR_VGPU_MEMORY_BYTES"
ENV_COMPUTE_PERCENT = "ALNAIR_VGPU_COMPUTE_PERCENT"
# Every variable of the hand-off: a launcher sets them, never takes them from a tenant.
ENV_VARIABLES = (ENV_VISIBLE_DEVICES, ENV_PRELOAD, ENV_WORKSPACE, ENV_WORKLOAD_ID,
                 ENV_MEMORY_BYTES, ENV_COMPUTE_PERCENT)

# The workspace: the limits file, the region and (container mode) the ld.so.preload file.
LIMITS_FILE = "limits"
REGION_FILE = cuda_region.FILE_NAME
LD_SO_PRELOAD_FILE = "ld.so.preload"
LIMITS_MODE = 0o444
# Where the container sees the limits file: the interceptor's compile-time constant
# (CI_LIMITS_PATH in ci_limits.c), never taken from the environment.
FIXED_LIMITS_PATH = "/etc/alnair/limits"
# Read by the dynamic loader of every process in the container, LD_PRELOAD or not.
LD_SO_PRELOAD_PATH = "/etc/ld.so.preload"
# Container mode. The workspace is the plugin's (root's) and mounted read-only: no tenant
# writes it. The region must be writable by whatever user the container runs as (not known
# at Allocate), hence world-writable; only this workload's container mounts it, and the
# workspace root (WORKSPACE_ROOT_MODE) keeps other users of the host out. This replaces the
# former 0o777 workspace, which let any host user, and the tenant, replace the limits file's
# directory entries and delete or swap the region.
WORKSPACE_MODE = 0o755
REGION_MODE = 0o666
WORKSPACE_ROOT_MODE = 0o700
# Local mode: the platform's user (which runs every local workload) and nobody else.
LOCAL_WORKSPACE_MODE = 0o700

GIB = 1 << 30
_FORBIDDEN = frozenset("\n\r\0#")
# The interceptor's buffer for mps_pipe_directory (ci_limits.c); it trims blanks around values.
_MPS_PIPE_MAX_BYTES = 1023
# ld.so.preload splits on blanks and ':'; a path holding one would preload something else.
_PRELOAD_FORBIDDEN = frozenset(" \t\n\r\0:#")


@dataclass(frozen=True)
class CudaShare:
    """One workload's share of one card, as the interceptor receives it.

    ``memory_gib`` and ``compute_percent`` of 0 mean no limit on that resource.
    ``mps_pipe_directory``: MPS mode, the card's MPS pipe directory as the workload sees it
    (absolute); empty: time-slicing mode.
    """

    workload_id: str
    gpu_uuid: str
    memory_gib: int = 0
    compute_percent: int = 0
    mps_pipe_directory: str = ""

    def __post_init__(self) -> None:
        problems = []
        if self.memory_gib < 0:
            problems.append(f"memory {self.memory_gib} GiB is negative")
        if not 0 <= self.compute_percent <= 100:
            problems.append(f"compute {self.compute_percent} % is outside 0..100 (0: no limit)")
        for name, value in (("workload id", self.workload_id), ("GPU UUID", self.gpu_uuid)):
            if not value or _FORBIDDEN & set(value):
                problems.append(f"{name} {value!r} is empty or holds a line break, NUL or '#'")
        mps = self.mps_pipe_directory
        if mps and (not mps.startswith("/") or _FORBIDDEN & set(mps) or mps != mps.strip()
                    or len(mps.encode()) > _MPS_PIPE_MAX_BYTES):
            problems.append(f"MPS pipe directory {mps!r} is not an absolute path of at most "
                            f"{_MPS_PIPE_MAX_BYTES} bytes without a line break, NUL, '#' or "
                            "surrounding blanks")
        if problems:
            raise PermanentError(f"cannot hand {self.workload_id!r} to the interceptor: "
                                 + "; ".join(problems))

    @property
    def memory_bytes(self) -> int:
        return self.memory_gib * GIB


def render_limits(share: CudaShare, *, workspace: str | None = None) -> str:
    """The limits file's text (format: ``native/cuda_intercept/README.md``, "limits file").

    ``workspace``: container mode only, where the container sees its workspace; the
    interceptor reads it from the fixed file and nowhere else.
    """
    lines = [f"# Alnair GPU share of {share.workload_id} on {share.gpu_uuid}; "
             "a missing key means no limit"]
    if share.memory_gib:
        lines.append(f"memory_bytes = {share.memory_bytes}")
    if share.compute_percent:
        lines.append(f"compute_percent = {share.compute_percent}")
    lines.append(f"workload_id = {share.workload_id}")
    if share.mps_pipe_directory:
        lines.append(f"mps_pipe_directory = {share.mps_pipe_directory}")
    if workspace is not None:
        if not workspace.startswith("/") or _FORBIDDEN & set(workspace):
            raise PermanentError(f"workspace {workspace!r} must be an absolute path without "
                                 "a line break, NUL or '#'")
        lines.append(f"workspace = {workspace}")
    return "\n".join(lines) + "\n"


def render_ld_so_preload(interceptor: str) -> str:
    """The container's ``/etc/ld.so.preload``: the library's path inside the container."""
    if not interceptor.startswith("/") or _PRELOAD_FORBIDDEN & set(interceptor):
        raise PermanentError(f"interceptor path {interceptor!r} must be absolute, without blanks, "
                             "':' or '#' (the dynamic loader splits /etc/ld.so.preload on them)")
    return interceptor + "\n"


def _write_read_only(path: Path, text: str) -> Path:
    """(Re)write ``path`` atomically with mode :data:`LIMITS_MODE`.

    A reader sees the old file or the new one, never a part. The temporary file has a fresh
    name, so one left read-only by a crash cannot block the next write.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), LIMITS_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_limits(workspace: Path, share: CudaShare, *, container_workspace: str | None = None) -> Path:
    """(Re)write ``workspace/limits`` atomically, read-only; returns its path.

    ``container_workspace``: see :func:`render_limits` (container mode).
    """
    return _write_read_only(Path(workspace) / LIMITS_FILE,
                            render_limits(share, workspace=container_workspace))


def create_region(workspace: Path) -> Path:
    """Create the empty region file (mode :data:`REGION_MODE`) unless it exists; returns its path.

    Container mode: the interceptor never creates it (the workspace is read-only to the
    tenant) and refuses allocations without it. An existing region is kept: its workload's
    processes may already be accounted in it.
    """
    path = Path(workspace) / REGION_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, REGION_MODE)
    except FileExistsError:
        return path
    try:
        os.fchmod(fd, REGION_MODE)  # whatever the umask
    finally:
        os.close(fd)
    return path


def prepare_container_workspace(workspace: Path, share: CudaShare, *, container_workspace: str,
                                interceptor: str) -> Path:
    """Lay out a container's workspace (idempotent); returns it.

    The directory (mode :data:`WORKSPACE_MODE`), the limits file naming
    ``container_workspace`` (the container mounts it at :data:`FIXED_LIMITS_PATH`), the empty
    region and the ``ld.so.preload`` file naming ``interceptor`` (the library's path in the
    container). The mounts that make them tamper-proof are the device plugin's.
    """
    workspace = Path(workspace)
    preload = render_ld_so_preload(interceptor)
    workspace.mkdir(mode=WORKSPACE_MODE, exist_ok=True)
    workspace.chmod(WORKSPACE_MODE)
    write_limits(workspace, share, container_workspace=container_workspace)
    create_region(workspace)
    _write_read_only(workspace / LD_SO_PRELOAD_FILE, preload)
    return workspace


def interceptor_env(share: CudaShare, *, workspace: str, interceptor: str | None) -> dict[str, str]:
    """The hand-off's variables for a process that sees its workspace at ``workspace`` and
    the library at ``interceptor`` (None: not preloaded, e.g. a simulated GPU).

    None of them can loosen a limit: the limit variables only tighten the limits file, and
    in container mode the interceptor takes its workspace from the fixed limits file (the
    variable only tells the workload's own tools where its region is).
    """
    env = {ENV_VISIBLE_DEVICES: share.gpu_uuid, ENV_WORKSPACE: workspace,
           ENV_WORKLOAD_ID: share.workload_id}
    if interceptor is not None:
        env[ENV_PRELOAD] = interceptor
    if share.memory_gib:
        env[ENV_MEMORY_BYTES] = str(share.memory_bytes)
    if share.compute_percent:
        env[ENV_COMPUTE_PERCENT] = str(share.compute_percent)
    return env
