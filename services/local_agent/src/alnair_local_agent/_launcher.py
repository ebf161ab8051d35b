"""Start a workload the way the device plugin starts a container's process.

Same environment contract as a pod on a GPU node: ``CUDA_VISIBLE_DEVICES`` names the card
the scheduler chose (by UUID), ``LD_PRELOAD`` loads the interceptor, the limits come both
as variables and in the workspace's ``limits`` file (which the interceptor trusts first),
and ``ALNAIR_WORKSPACE``/``ALNAIR_WORKLOAD_ID`` tie the process to its shared region.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from alnair.v1 import workload_pb2 as wl

from ._workspace import GIB, Workspace

# Never taken from the submitting shell: the agent decides them.
_RESERVED = ("CUDA_VISIBLE_DEVICES", "LD_PRELOAD")
PRELOAD_FOR_COMMAND = "ALNAIR_REAPER_LD_PRELOAD"
# Run as a file, isolated and without site: it needs only the standard library, starts in
# milliseconds, and the user's PYTHON* variables cannot break it.
REAPER = Path(__file__).with_name("_reaper.py")


def workload_env(base: dict[str, str], *, gpu_uuid: str, memory_gib: int, compute_percent: int,
                 workspace: Workspace, workload_id: str,
                 interceptor: Path | None) -> dict[str, str]:
    env = {k: v for k, v in base.items()
           if k not in _RESERVED and not k.startswith("ALNAIR_")}
    env.update({
        "CUDA_VISIBLE_DEVICES": gpu_uuid,
        "ALNAIR_VGPU_MEMORY_BYTES": str(memory_gib * GIB),
        "ALNAIR_VGPU_COMPUTE_PERCENT": str(compute_percent),
        "ALNAIR_WORKSPACE": str(workspace.path),
        "ALNAIR_WORKLOAD_ID": workload_id,
    })
    if interceptor is not None:
        env["LD_PRELOAD"] = str(interceptor)
    return env


def reaper_env(env: dict[str, str]) -> dict[str, str]:
    """The reaper must not load the interceptor itself (it would join the workload's
    region): it gets the preload under another name and restores it for the command."""
    out = dict(env)
    if "LD_PRELOAD" in out:
        out[PRELOAD_FOR_COMMAND] = out.pop("LD_PRELOAD")
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
