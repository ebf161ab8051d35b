"""Hand a workload's GPU share to the CUDA interceptor: the writer side of its contract.

The scheduler picks a card and the amounts; the device plugin (a pod's container) and the
local agent (a local process) hand that decision to ``libalnair_cuda.so``
(``native/cuda_intercept``) the same way, through this module: a ``limits`` file in the
workload's workspace and a few environment variables. The interceptor reads them in
``ci_limits.c``; :mod:`alnair_common.cuda_region` reads back the region it keeps next to the
limits file.

The invariants both adapters rely on:

* An amount of 0 means "not asked for, no limit": the key is left out of the file and the
  variable out of the environment. The interceptor reads a written ``memory_bytes = 0`` as
  "refuse every allocation" and ``compute_percent = 0`` as invalid (the strictest 1 %).
* The limits file is the interceptor's only source when it exists (a tenant cannot loosen
  its limits through its environment); it is replaced atomically and left read-only.
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
    "GIB",
    "LIMITS_FILE",
    "LIMITS_MODE",
    "REGION_FILE",
    "SHARED_WORKSPACE_MODE",
    "CudaShare",
    "interceptor_env",
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

# The workspace: the limits file (written here) and the region (created by the interceptor).
LIMITS_FILE = "limits"
REGION_FILE = cuda_region.FILE_NAME
LIMITS_MODE = 0o444
# For a workspace whose processes may run as any user (containers): each creates the region.
SHARED_WORKSPACE_MODE = 0o777

GIB = 1 << 30
_FORBIDDEN = frozenset("\n\r\0#")


@dataclass(frozen=True)
class CudaShare:
    """One workload's share of one card, as the interceptor receives it.

    ``memory_gib`` and ``compute_percent`` of 0 mean no limit on that resource.
    """

    workload_id: str
    gpu_uuid: str
    memory_gib: int = 0
    compute_percent: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.memory_gib < 0:
            problems.append(f"memory {self.memory_gib} GiB is negative")
        if not 0 <= self.compute_percent <= 100:
            problems.append(f"compute {self.compute_percent} % is outside 0..100 (0: no limit)")
        for name, value in (("workload id", self.workload_id), ("GPU UUID", self.gpu_uuid)):
            if not value or _FORBIDDEN & set(value):
                problems.append(f"{name} {value!r} is empty or holds a line break, NUL or '#'")
        if problems:
            raise PermanentError(f"cannot hand {self.workload_id!r} to the interceptor: "
                                 + "; ".join(problems))

    @property
    def memory_bytes(self) -> int:
        return self.memory_gib * GIB


def render_limits(share: CudaShare) -> str:
    """The limits file's text (format: ``native/cuda_intercept/README.md``, "limits file")."""
    lines = [f"# Alnair GPU share of {share.workload_id} on {share.gpu_uuid}; "
             "a missing key means no limit"]
    if share.memory_gib:
        lines.append(f"memory_bytes = {share.memory_bytes}")
    if share.compute_percent:
        lines.append(f"compute_percent = {share.compute_percent}")
    lines.append(f"workload_id = {share.workload_id}")
    return "\n".join(lines) + "\n"


def write_limits(workspace: Path, share: CudaShare) -> Path:
    """(Re)write ``workspace/limits`` atomically, read-only; returns its path.

    A reader sees the old file or the new one, never a part. The temporary file has a fresh
    name, so one left read-only by a crash cannot block the next write.
    """
    target = Path(workspace) / LIMITS_FILE
    fd, tmp = tempfile.mkstemp(dir=workspace, prefix=f".{LIMITS_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(render_limits(share))
            os.fchmod(f.fileno(), LIMITS_MODE)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def interceptor_env(share: CudaShare, *, workspace: str, interceptor: str | None) -> dict[str, str]:
    """The hand-off's variables for a process that sees its workspace at ``workspace`` and
    the library at ``interceptor`` (None: not preloaded, e.g. a simulated GPU)."""
    env = {ENV_VISIBLE_DEVICES: share.gpu_uuid, ENV_WORKSPACE: workspace,
           ENV_WORKLOAD_ID: share.workload_id}
    if interceptor is not None:
        env[ENV_PRELOAD] = interceptor
    if share.memory_gib:
        env[ENV_MEMORY_BYTES] = str(share.memory_bytes)
    if share.compute_percent:
        env[ENV_COMPUTE_PERCENT] = str(share.compute_percent)
    return env
