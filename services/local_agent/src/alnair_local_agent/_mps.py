"""MPS mode in local mode: one CUDA MPS control daemon per GPU, started and supervised here.

With ``alnair up --mps`` (``ALNAIR_MPS=true``) a workload's compute share is an SM partition
of its card (MPS's active-thread percentage) instead of a time slice, and its memory limit
is also MPS's pinned-memory limit. The interceptor sets both in the workload from its limits
file, with the card's pipe directory (``mps_pipe_directory``), so none is taken from the
workload's own environment (``native/cuda_intercept/README.md``, MPS mode).

Each card gets ``<data dir>/mps/<gpu uuid>/{pipe,log}`` (the platform user's only) and a
control daemon started with ``CUDA_VISIBLE_DEVICES=<uuid>`` and those directories; it spawns
the MPS server when the first client connects. Every ``check_seconds`` the agent asks each
daemon for its servers (``get_server_list``); one that does not answer — the daemon died,
or a client's fatal fault took the server down with it — is started again, and the
workloads running on that card are named in the warning: their contexts went with the
server (MPS's known limit: a fatal fault of one client ends the server's other clients).
Daemons outlive the agent, like the workloads (a restarted agent finds them answering); `echo
quit | CUDA_MPS_PIPE_DIRECTORY=… nvidia-cuda-mps-control` stops one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from alnair_common import ConfigError, get_logger

from ._workspace import make_private_directory

log = get_logger("alnair.local-agent")
ANSWER_SECONDS = 10.0


@dataclass(frozen=True)
class MpsCard:
    uuid: str
    root: Path

    @property
    def pipe(self) -> Path:
        return self.root / "pipe"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    def env(self) -> dict[str, str]:
        return {**os.environ, "CUDA_VISIBLE_DEVICES": self.uuid, "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe),
                "CUDA_MPS_LOG_DIRECTORY": str(self.logs)}


class MpsDaemons:
    def __init__(self, control: str, mps_dir: Path, gpu_uuids: Iterable[str]) -> None:
        self.control = control
        self.cards = {u: MpsCard(u, mps_dir / u) for u in gpu_uuids}
        self.restarts = 0

    def pipe_directory(self, gpu_uuid: str) -> str:
        return str(self.cards[gpu_uuid].pipe)

    async def _ask(self, card: MpsCard, command: str) -> tuple[int, str]:
        try:
            process = await asyncio.create_subprocess_exec(
                self.control, env=card.env(), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        except OSError as e:
            raise ConfigError(f"MPS mode: cannot run {self.control!r} ({e.strerror}); install the "
                              "NVIDIA driver's MPS tools or start without --mps") from e
        try:
            out, _ = await asyncio.wait_for(process.communicate(f"{command}\n".encode()), ANSWER_SECONDS)
        except TimeoutError:
            return 124, "no answer"
        finally:  # also when the agent stops mid-question: no process or pipe is left behind
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await asyncio.shield(process.wait())
        return process.returncode or 0, out.decode(errors="replace").strip()

    async def answering(self, card: MpsCard) -> bool:
        if not (card.pipe / "control").exists():
            return False
        code, _ = await self._ask(card, "get_server_list")
        return code == 0

    async def start(self) -> None:
        """A daemon per card, unless one already answers there (after an agent restart)."""
        for card in self.cards.values():
            if await self.answering(card):
                log.info("MPS control daemon found running", gpu=card.uuid, pipe=str(card.pipe))
                continue
            await self._launch(card)

    async def _launch(self, card: MpsCard) -> None:
        for d in (card.root, card.pipe, card.logs):
            make_private_directory(d)
        start_log = card.logs / "start.log"
        # Its output to a file, not a pipe: the daemon it forks may keep the pipe open.
        with open(start_log, "ab") as out_file:  # noqa: ASYNC230 - once per daemon start
            try:
                process = await asyncio.create_subprocess_exec(
                    self.control, "-d", env=card.env(), stdin=asyncio.subprocess.DEVNULL,
                    stdout=out_file, stderr=asyncio.subprocess.STDOUT)
            except OSError as e:
                raise ConfigError(f"MPS mode: cannot run {self.control!r} ({e.strerror}); install "
                                  "the NVIDIA driver's MPS tools or start without --mps") from e
            await process.wait()
        deadline = asyncio.get_running_loop().time() + ANSWER_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            if await self.answering(card):
                log.info("MPS control daemon started", gpu=card.uuid, pipe=str(card.pipe))
                return
            await asyncio.sleep(0.1)
        said = start_log.read_text(errors="replace").strip().splitlines()[-3:]
        raise ConfigError(f"MPS mode: the control daemon for {card.uuid} did not answer within "
                          f"{ANSWER_SECONDS:.0f} s (exit {process.returncode}: "
                          f"{' | '.join(said) or 'no output'}); see {card.logs}")

    async def supervise(self, every: float, running_on: Callable[[str], list[str]]) -> None:
        """Start again a daemon that stopped answering, naming the workloads it took along."""
        while True:
            await asyncio.sleep(every)
            for card in self.cards.values():
                if await self.answering(card):
                    continue
                affected = running_on(card.uuid)
                log.warning("MPS control daemon not answering; starting it again", gpu=card.uuid,
                            workloads_affected=affected, logs=str(card.logs))
                self.restarts += 1
                try:
                    await self._launch(card)
                except ConfigError as e:
                    log.error("MPS control daemon did not start again", gpu=card.uuid, error=str(e))
