"""Start a workload the way the device plugin starts a container's process.

Same hand-off to the interceptor as a pod on a GPU node (:mod:`alnair_common.cuda_handoff`):
the card the scheduler chose (by UUID), the interceptor preloaded, the limits both as
variables and in the workspace's limits file (the variables can only tighten it), and the
workspace and workload id that tie the process to its shared region.

Local mode differs from a container in one respect that matters: there is no fixed, read-only
limits file and no ``/etc/ld.so.preload`` (the workload runs on the host, as the platform's
user), so ``ALNAIR_WORKSPACE`` and ``LD_PRELOAD`` are what bind the process to its limits, and
a workload that removes them leaves its limits behind. See "What a limit guarantees" in
``native/cuda_intercept/README.md``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common.cuda_handoff import ENV_PRELOAD, ENV_VARIABLES, CudaShare, interceptor_env

from ._workspace import Workspace

PRELOAD_FOR_COMMAND = "ALNAIR_REAPER_LD_PRELOAD"
# Run as a file, isolated and without site: it needs only the standard library, starts in
# milliseconds, and the user's PYTHON* variables cannot break it.
REAPER = Path(__file__).with_name("_reaper.py")


def cuda_share(assignment: common_pb2.GpuAssignment, workload_uid: str,
               mps_pipe_directory: str = "") -> CudaShare:
    """What the interceptor gets of a local workload's assignment; its identity is the uid.
    In MPS mode, the card's pipe directory: the interceptor connects the workload there with
    its share as MPS limits."""
    return CudaShare(workload_id=workload_uid, gpu_uuid=assignment.gpu_uuid,
                     memory_gib=assignment.memory_gib, compute_percent=assignment.compute_percent,
                     mps_pipe_directory=mps_pipe_directory)


# The data client's variables (alnair_dataset), which `alnair run --dataset` hands over: they
# choose what the workload reads, not what it may use, so they pass where no other ALNAIR_*
# setting does.
DATA_CLIENT_VARIABLES = ("ALNAIR_DATASET", "ALNAIR_CACHE_TIER_URL", "ALNAIR_CACHE_PREFIX")


def submitter_env(base: dict[str, str]) -> dict[str, str]:
    """What a local process (a workload, a job's rendezvous host) keeps of the submitting
    shell's environment: no hand-off variable and no ``ALNAIR_*`` setting but the data
    client's (``ALNAIR_DATASET*``, the tier URL and prefix)."""
    return {k: v for k, v in base.items() if k not in ENV_VARIABLES
            and (not k.startswith("ALNAIR_") or k.startswith(DATA_CLIENT_VARIABLES))}


def workload_env(base: dict[str, str], share: CudaShare, *, workspace: Workspace,
                 interceptor: Path | None) -> dict[str, str]:
    """The submitter's environment (:func:`submitter_env`) with the hand-off's variables."""
    env = submitter_env(base)
    env.update(interceptor_env(share, workspace=str(workspace.path),
                               interceptor=None if interceptor is None else str(interceptor)))
    return env


def reaper_env(env: dict[str, str]) -> dict[str, str]:
    """The reaper must not load the interceptor itself (it would join the workload's
    region): it gets the preload under another name and restores it for the command."""
    out = dict(env)
    if ENV_PRELOAD in out:
        out[PRELOAD_FOR_COMMAND] = out.pop(ENV_PRELOAD)
    return out


async def launch(submission: wl.Workload, env: dict[str, str],
                 workspace: Workspace) -> asyncio.subprocess.Process:
    """Start the command under the reaper, in its own session, output to ``output.log``."""
    cwd = submission.working_dir or None
    if cwd is not None and not Path(cwd).is_dir():  # noqa: ASYNC240 - one stat per launch
        raise NotADirectoryError(f"working directory {cwd} does not exist")
    with open(workspace.output, "ab", buffering=0) as out:  # noqa: ASYNC230 - once per launch
        return await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", str(REAPER), str(workspace.exit_file), "--",
            *submission.command,
            env=reaper_env(env),
            cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True)
