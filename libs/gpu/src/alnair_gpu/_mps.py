"""MPS mode: one CUDA MPS control daemon per GPU, started and supervised by a node adapter.

Both adapters run it: the local agent (``alnair up --mps``) and the device plugin
(``ALNAIR_MPS=true``). In MPS mode a workload's compute share is an SM partition of its
card (MPS's active-thread percentage) instead of a time slice, and its memory limit is also
MPS's pinned-memory limit. The interceptor sets both in the workload from its limits file,
with the card's pipe directory (``mps_pipe_directory``), so none is taken from the
workload's own environment (``native/cuda_intercept/README.md``, MPS mode).

Each card gets ``<mps dir>/<gpu uuid>/{pipe,log}`` (mode ``directory_mode``: the local
agent's user only; the device plugin's 0755, root's, read by every container) and a control
daemon started with ``CUDA_VISIBLE_DEVICES=<uuid>`` and those directories; it spawns the MPS
server when the first client connects. :meth:`MpsDaemons.supervise` asks each daemon for its
servers (``get_server_list``) every ``every`` seconds; one that does not answer — the daemon
died — is started again, and the workloads running on that card are named in the warning:
their contexts went with the server. A client's fatal GPU fault does not stop the server (seen
on the H200, CUDA 13): the server tears down the contexts of every client of the card, marks
them with a sticky error, resets the device and serves new clients once those are gone — MPS's
known limit: one client's fault ends its neighbours' work. :func:`mps_faults` reads those
faults from the server's log and :meth:`MpsDaemons.fault_of` finds the one that ended a given
process, so an adapter can say why a workload failed and whose fault it was.
:attr:`MpsDaemons.down` names the cards whose daemon does not answer, with why; ``on_change``
hears each change of it (the device plugin reports such a card unhealthy).

A missing control program is a :class:`~alnair_common.ConfigError` (the node is set up
wrong; ``off_hint`` says how to turn MPS mode off). :meth:`start` also raises when a daemon
does not answer (the local agent refuses to start); :meth:`start_each` records it in
:attr:`down` instead. :meth:`stop` asks every daemon to quit (the device plugin's
shutdown); the local agent's daemons outlive it, like its workloads (a restarted agent finds
them answering).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from alnair_common import ConfigError, get_logger

log = get_logger("alnair.mps")
ANSWER_SECONDS = 10.0
PRIVATE_MODE = 0o700


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


@dataclass(frozen=True)
class MpsFault:
    """One fatal GPU fault the MPS server logged: the client processes whose contexts it tore
    down (a sticky error: their CUDA calls fail from then on). The log does not say which of
    them faulted: it calls each an "error triggering process"."""

    torn_down: frozenset[int]


# As the H200's CUDA 13 MPS server writes it (its own wording), once per fault:
#   The following client process have a sticky error set:
#   1303
#   1345
_STICKY = re.compile(r"following client process(?:es)? ha(?:s|ve) a sticky error set")
_PID_LINE = re.compile(r"^\[[^\]]*\]\s*(\d+)\s*$")


def mps_faults(server_log: str) -> list[MpsFault]:
    """The fatal faults in an MPS server log, oldest first."""
    faults: list[MpsFault] = []
    sticky: set[int] | None = None
    for line in server_log.splitlines():
        if sticky is not None:
            m = _PID_LINE.match(line)
            if m:
                sticky.add(int(m[1]))
                continue
            faults.append(MpsFault(frozenset(sticky)))
            sticky = None
        if _STICKY.search(line):
            sticky = set()
    if sticky is not None:
        faults.append(MpsFault(frozenset(sticky)))
    return [f for f in faults if f.torn_down]


class MpsDaemons:
    def __init__(self, control: str, mps_dir: Path, gpu_uuids: Iterable[str], *,
                 directory_mode: int = PRIVATE_MODE, off_hint: str = "start without --mps",
                 answer_seconds: float = ANSWER_SECONDS) -> None:
        """``answer_seconds``: how long a started daemon, or one asked a question, has to answer."""
        self.control = control
        self.answer_seconds = answer_seconds
        self.cards = {u: MpsCard(u, Path(mps_dir) / u) for u in gpu_uuids}
        self.directory_mode = directory_mode
        self.off_hint = off_hint
        self.restarts = 0
        self.down: dict[str, str] = {}

    def pipe_directory(self, gpu_uuid: str) -> str:
        return str(self.cards[gpu_uuid].pipe)

    def fault_of(self, gpu_uuid: str, pid: int) -> MpsFault | None:
        """The newest fatal fault on this card's MPS server that tore down ``pid``'s contexts."""
        card = self.cards.get(gpu_uuid)
        if card is None:
            return None
        try:
            text = (card.logs / "server.log").read_text(errors="replace")
        except OSError:
            return None
        return next((f for f in reversed(mps_faults(text)) if pid in f.torn_down), None)

    def _cannot_run(self, e: OSError) -> ConfigError:
        return ConfigError(f"MPS mode: cannot run {self.control!r} ({e.strerror}); install the "
                           f"NVIDIA driver's MPS tools or {self.off_hint}")

    async def _ask(self, card: MpsCard, command: str) -> tuple[int, str]:
        try:
            process = await asyncio.create_subprocess_exec(
                self.control, env=card.env(), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        except OSError as e:
            raise self._cannot_run(e) from e
        try:
            out, _ = await asyncio.wait_for(process.communicate(f"{command}\n".encode()), self.answer_seconds)
        except TimeoutError:
            return 124, "no answer"
        finally:  # also when the adapter stops mid-question: no process or pipe is left behind
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
        """A daemon per card, unless one already answers there (after an agent restart);
        a card whose daemon does not answer is raised (ConfigError)."""
        down = await self.start_each()
        if down:
            raise ConfigError(next(iter(down.values())))

    async def start_each(self) -> dict[str, str]:
        """As :meth:`start`, but a card whose daemon does not answer is recorded in
        :attr:`down` (and returned) instead of raised; a missing program still raises."""
        for card in self.cards.values():
            if await self.answering(card):
                log.info("MPS control daemon found running", gpu=card.uuid, pipe=str(card.pipe))
                continue
            try:
                await self._launch(card)
            except ConfigError as e:
                if isinstance(e.__cause__, OSError):
                    raise
                log.error("MPS control daemon did not start", gpu=card.uuid, error=str(e))
                self.down[card.uuid] = str(e)
        return dict(self.down)

    def _make_directory(self, path: Path) -> None:
        path.mkdir(mode=self.directory_mode, parents=True, exist_ok=True)
        path.chmod(self.directory_mode)  # also one made before, or under another umask

    async def _launch(self, card: MpsCard) -> None:
        for d in (card.root, card.pipe, card.logs):
            self._make_directory(d)
        start_log = card.logs / "start.log"
        # Its output to a file, not a pipe: the daemon it forks may keep the pipe open.
        with open(start_log, "ab") as out_file:  # noqa: ASYNC230 - once per daemon start
            try:
                process = await asyncio.create_subprocess_exec(
                    self.control, "-d", env=card.env(), stdin=asyncio.subprocess.DEVNULL,
                    stdout=out_file, stderr=asyncio.subprocess.STDOUT)
            except OSError as e:
                raise self._cannot_run(e) from e
            await process.wait()
        deadline = asyncio.get_running_loop().time() + self.answer_seconds
        while asyncio.get_running_loop().time() < deadline:
            if await self.answering(card):
                log.info("MPS control daemon started", gpu=card.uuid, pipe=str(card.pipe))
                return
            await asyncio.sleep(0.1)
        said = start_log.read_text(errors="replace").strip().splitlines()[-3:]
        raise ConfigError(f"MPS mode: the control daemon for {card.uuid} did not answer within "
                          f"{self.answer_seconds:g} s (exit {process.returncode}: "
                          f"{' | '.join(said) or 'no output'}); see {card.logs}")

    async def supervise(self, every: float, running_on: Callable[[str], list[str]],
                        on_change: Callable[[], Awaitable[None]] | None = None) -> None:
        """Start again a daemon that stopped answering, naming the workloads it took along;
        ``on_change`` after :attr:`down` changed (a card went down or came back)."""
        while True:
            await asyncio.sleep(every)
            before = dict(self.down)
            for card in self.cards.values():
                if await self.answering(card):
                    if self.down.pop(card.uuid, None) is not None:
                        log.info("MPS control daemon answers again", gpu=card.uuid)
                    continue
                affected = running_on(card.uuid)
                log.warning("MPS control daemon not answering; starting it again", gpu=card.uuid,
                            workloads_affected=affected, logs=str(card.logs))
                self.restarts += 1
                try:
                    await self._launch(card)
                    self.down.pop(card.uuid, None)
                except ConfigError as e:
                    log.error("MPS control daemon did not start again", gpu=card.uuid, error=str(e))
                    self.down[card.uuid] = str(e)
            if on_change is not None and self.down != before:
                await on_change()

    async def stop(self) -> None:
        """Ask each daemon to quit (it stops its server, and so its clients); one that does
        not answer is left as it is."""
        for card in self.cards.values():
            if (card.pipe / "control").exists():
                code, said = await self._ask(card, "quit")
                if code != 0:
                    log.warning("MPS control daemon did not quit", gpu=card.uuid, exit=code, said=said)
                else:
                    log.info("MPS control daemon stopped", gpu=card.uuid)
