"""The c10d rendezvous hosts of local training jobs: one process per gang, outside its workers.

Each runs ``alnair_lifecycle/rendezvous_host.py`` with the job's own Python (the interpreter
of the ``torchrun`` on the job's ``PATH``: torch is the job's, not the platform's), in a
session of its own so that it outlives an agent restart like the workers do; a restarted
agent finds it again by its pid file. Its workers run here, so the host drops a member whose
process is gone at once (``--evict-dead-local``) instead of after its keep-alive lapses. A
host is stopped when its gang is: a new gang (after
a failure) meets in a new rendezvous, so no worker ever joins a round of the old one.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import alnair_lifecycle
from alnair_common import PermanentError, TemporaryError, get_logger

from ._job_files import JobFiles
from ._launcher import submitter_env
from ._workspace import record_process, recorded_process, still_running

log = get_logger("alnair.local-agent")
HOST_SCRIPT = Path(alnair_lifecycle.__file__).with_name("rendezvous_host.py")
START_SECONDS = 60.0  # importing torch on a loaded machine takes seconds


def job_python(env: dict[str, str]) -> str:
    """The interpreter of the ``torchrun`` the workers will run (its ``#!`` line)."""
    torchrun = shutil.which("torchrun", path=env.get("PATH", os.defpath))
    if torchrun is None:
        raise PermanentError("torchrun is not on the job's PATH: submit the job from a shell "
                             "whose environment has PyTorch (`python -m pip install torch`)")
    with open(torchrun, "rb") as f:
        first = f.readline().decode(errors="replace").strip()
    if first.startswith("#!") and "python" in first:
        return first[2:].strip().split()[0]
    found = shutil.which("python3", path=env.get("PATH", os.defpath))
    if found is None:
        raise PermanentError(f"{torchrun} names no Python interpreter and python3 is not on the "
                             "job's PATH")
    return found


class RendezvousHosts:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host

    async def ensure(self, job: JobFiles, rendezvous_id: str, env: dict[str, str]) -> str:
        """The endpoint (``host:port``) of the gang's rendezvous, started if not running."""
        where = job.rendezvous(rendezvous_id)
        found = _running(where)
        endpoint = _endpoint(where)
        if found and endpoint:
            return endpoint
        where.mkdir(parents=True, exist_ok=True)
        (where / "endpoint").unlink(missing_ok=True)
        python = job_python(env)
        clean = submitter_env(env)
        with open(where / "output.log", "ab", buffering=0) as out:  # noqa: ASYNC230 - once per gang
            process = await asyncio.create_subprocess_exec(
                python, str(HOST_SCRIPT), "--run-id", rendezvous_id, "--dir", str(where),
                "--host", self.host, "--evict-dead-local", env=clean, stdin=asyncio.subprocess.DEVNULL,
                stdout=out, stderr=out, start_new_session=True)
        record_process(where / "pid", process.pid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_SECONDS
        while loop.time() < deadline:
            endpoint = _endpoint(where)
            if endpoint:
                log.info("rendezvous host started", rendezvous=rendezvous_id, endpoint=endpoint,
                         pid=process.pid)
                return endpoint
            if process.returncode is not None:
                break
            try:
                await asyncio.wait_for(process.wait(), 0.1)
            except TimeoutError:
                pass
        tail = _tail(where / "output.log")
        _signal(where, signal.SIGKILL)
        raise TemporaryError(f"the rendezvous host of {rendezvous_id} did not start within "
                             f"{START_SECONDS:.0f} s ({python}): {tail}", retry_after=5.0)

    def stop(self, job: JobFiles, *, keep: str | None = None) -> None:
        """Stop the job's hosts, but the one of ``keep``."""
        for rid in job.rendezvous_ids():
            if rid != keep and _running(job.rendezvous(rid)):
                log.info("rendezvous host stopped", rendezvous=rid)
                _signal(job.rendezvous(rid), signal.SIGTERM)

    @staticmethod
    def rounds(job: JobFiles, rendezvous_id: str, after: int) -> Iterator[tuple[int, list[list]]]:
        """Closed rounds the host wrote, numbered above ``after``."""
        try:
            lines = (job.rendezvous(rendezvous_id) / "rounds.jsonl").read_text().splitlines()
        except OSError:
            return
        for line in lines:
            try:
                r = json.loads(line)
                number, members = int(r["round"]), list(r["members"])
            except (ValueError, KeyError, TypeError):
                continue  # a line being written
            if number > after:
                yield number, members


def _running(where: Path) -> bool:
    found = recorded_process(where / "pid")
    return found is not None and still_running(*found)


def _signal(where: Path, sig: int) -> None:
    found = recorded_process(where / "pid")
    if found is not None and still_running(*found):
        try:
            os.kill(found[0], sig)
        except ProcessLookupError:
            pass


def _endpoint(where: Path) -> str:
    try:
        return (where / "endpoint").read_text().strip()
    except OSError:
        return ""


def _tail(path: Path) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-3:]) or "no output"
    except OSError:
        return "no output"
