"""``alnair up``: the embedded local platform — NATS with JetStream plus supervised services."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from alnair.v1 import common_pb2, platform_pb2, workload_pb2
from alnair_common import AlnairError, Bus, BusUnavailableError, ConfigError, ensure_streams, subjects
from alnair_common.credentials import BusCredentials
from alnair_common.natsd import NatsServer
from alnair_gpu import InventoryFormatError, SimulatedInventory
from alnair_lifecycle import LifecyclePublisher

from ._interceptor import InterceptorChoice, choose_interceptor
from ._platform import PlatformInfo, bus_credentials
from ._supervisor import Child, Supervisor

# Services of the local mode, in start order. kube-bridge and device-plugin are Kubernetes-only.
LOCAL_SERVICES = ("local-agent", "scheduler", "exporter", "profiler", "elastic-job",
                  "cache-hydrator")
_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "bright_red", "bright_cyan")


def agent_env(gpus: str | None, interceptor: Path | None, *, no_interceptor: bool = False,
              choice: InterceptorChoice | None = None, mps: bool = False) -> dict[str, str]:
    """Environment for the services from `alnair up`'s GPU options, checked before start.
    The interceptor is on by default where NVML finds real GPUs (:mod:`._interceptor`)."""
    env: dict[str, str] = {}
    if gpus is not None:
        if not gpus.startswith("sim:"):
            raise ConfigError(f"--gpus {gpus!r}: only a simulated inventory can be given, "
                              "e.g. --gpus sim:2x80; leave it out to use the machine's GPUs")
        try:
            SimulatedInventory.parse(gpus)  # before anything starts, not in the agent
        except InventoryFormatError as e:
            raise ConfigError(f"--gpus: {e}") from e
        env["ALNAIR_GPUS"] = gpus
    choice = choice or choose_interceptor(gpus, interceptor, no_interceptor)
    if choice.library is not None:
        env["ALNAIR_INTERCEPTOR_LIB"] = str(choice.library)
    if mps:
        if choice.library is None:
            raise ConfigError("--mps needs the interceptor (it sets each workload's MPS limits): "
                              "build it (make -C native/cuda_intercept lib) or pass --interceptor")
        env["ALNAIR_MPS"] = "true"
    return env


def service_children(data_dir: Path, nats_url: str, extra_env: dict[str, str]) -> list[Child]:
    """Each local service as a child process, connecting as its own bus identity."""
    credentials = bus_credentials(data_dir)
    children = []
    for name in LOCAL_SERVICES:
        env = {**os.environ, **extra_env, "ALNAIR_NATS_URL": nats_url,
               "ALNAIR_NATS_CREDENTIALS": str(credentials.seed_file(name)),
               "ALNAIR_DATA_DIR": str(data_dir), "ALNAIR_HEALTH_PORT": "0",
               "ALNAIR_LOG_FORMAT": "console", "PYTHONUNBUFFERED": "1"}
        env.pop("ALNAIR_CONFIG", None)
        if name == "cache-hydrator":
            # One user's workstation: any source that user can read, every bucket with the
            # user's own S3 credentials and every directory (only the user's own identities
            # reach this bus); set the variables to narrow it.
            env.setdefault("ALNAIR_CACHE_ALLOWED_ROOTS", "/")
            env.setdefault("ALNAIR_CACHE_ALLOWED_SOURCES", "s3://")
        module = "alnair_" + name.replace("-", "_")
        children.append(Child(name=name, argv=[sys.executable, "-m", module], env=env,
                              log_path=data_dir / "logs" / f"{name}.log"))
    return children


class Platform:
    def __init__(self, data_dir: Path, port: int, console: Console,
                 extra_env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.console = console
        self.nats = NatsServer(store_dir=data_dir / "jetstream", port=port,
                               log_file=data_dir / "logs" / "nats-server.log")
        self.extra_env = extra_env or {}
        self.started_at = datetime.now(UTC)
        self.supervisor: Supervisor | None = None
        self.bus: Bus | None = None

    def _sink(self, name: str, line: str) -> None:
        colour = _COLOURS[LOCAL_SERVICES.index(name) % len(_COLOURS)]
        self.console.print(f"[{colour}]{name:>14}[/] | {escape(line)}", highlight=False,
                           soft_wrap=True)

    async def run(self) -> None:
        # Handlers first: a Ctrl-C/SIGTERM while starting must still reach the `finally`, or the
        # nats-server (its own session) outlives this process.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # Private by default: the store, logs, workspaces and credentials below are the
        # user's alone, whatever mode a file inside gets.
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.data_dir, 0o700)
        # Every connection authenticates: the server trusts one NKey per role and lets each
        # publish and read only what its role needs (alnair_common.bus_permissions).
        credentials = BusCredentials.ensure(bus_credentials(self.data_dir).directory)
        self.nats.config = credentials.server_config()
        self.nats.start()
        info = PlatformInfo(nats_url=self.nats.url, pid=os.getpid(),
                            data_dir=str(self.data_dir))
        try:
            self.bus = await Bus.connect(self.nats.url, service="supervisor", role="platform",
                                         credentials=credentials.seed_file("platform"))
            await ensure_streams(self.bus)
            self.supervisor = Supervisor(
                service_children(self.data_dir, self.nats.url, self.extra_env), self._sink
            )
            await self.bus.serve(
                "alnair-supervisor",
                {subjects.platform_status(): (platform_pb2.StatusRequest, self.status)},
                description="Process table of the local platform",
            )
            info.write()
            if not stop.is_set():
                self.supervisor.start()
                self.console.print(
                    f"[bold]Alnair is up[/]: NATS at {self.nats.url}, data in {escape(str(self.data_dir))}. "
                    "[dim]`alnair status` in another terminal; Ctrl-C stops everything.[/]"
                )
            keeper = asyncio.create_task(self._keep_nats(stop), name="nats-server keeper")
            await stop.wait()
            await keeper
            self.console.print("[bold]stopping Alnair…[/]")
            await self._say_what_keeps_running()
        finally:
            info.remove()
            if self.supervisor is not None:
                await self.supervisor.stop()
            if self.bus is not None:
                await self.bus.drain()
            self.nats.stop()
            self.console.print("[bold]Alnair stopped.[/]")

    async def _say_what_keeps_running(self) -> None:
        """Workloads outlive the platform on purpose (a restart must not kill a training run;
        the next `alnair up` adopts them): say which, and how to stop them."""
        assert self.bus is not None
        try:
            states = await (await LifecyclePublisher.open(self.bus, "platform")).states()
        except AlnairError:
            return
        running = sorted(e.workload.ref.name for e in states
                         if e.workload.phase == workload_pb2.WORKLOAD_PHASE_RUNNING
                         and e.workload.ref.mode == common_pb2.MODE_LOCAL)
        if running:
            self.console.print(
                f"[yellow]{len(running)} workload(s) keep running: {escape(', '.join(running))}. "
                "The next `alnair up` adopts them; to stop one, stop its process (or Ctrl-C "
                "its `alnair run`).[/]")

    async def _keep_nats(self, stop: asyncio.Event) -> None:
        """nats-server is supervised like every other child: if it dies it is started again
        on the same port and store (JetStream's file store keeps the streams), and every
        client, services and `alnair run` alike, reconnects to it."""
        backoff = 0.5
        while not stop.is_set():
            process = self.nats.process
            if process is not None and process.poll() is not None:  # poll() reaps it
                self.console.print(f"[bold red]nats-server exited with {process.returncode}"
                                   "; starting it again[/]")
                self.nats.process = None
            if self.nats.process is None:
                try:
                    self.nats.launch()  # here, on the main thread: see NatsServer.launch
                    await asyncio.to_thread(self.nats.wait_listening)
                    backoff = 0.5
                except AlnairError as e:
                    self.console.print(f"[red]nats-server did not start: {escape(str(e))}; "
                                       f"next try in {backoff:g} s[/]")
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)

    async def status(self, _: platform_pb2.StatusRequest) -> platform_pb2.PlatformStatus:
        assert self.supervisor is not None and self.bus is not None
        reports = await asyncio.gather(
            *(self._health(c.name) for c in self.supervisor.children)
        )
        answer = platform_pb2.PlatformStatus(
            nats_url=self.nats.url, data_dir=str(self.data_dir), supervisor_pid=os.getpid()
        )
        answer.started_at.FromDatetime(self.started_at)
        for child, report in zip(self.supervisor.children, reports, strict=True):
            entry = child.to_proto()
            if report is not None:
                entry.health.CopyFrom(report)
            answer.services.append(entry)
        return answer

    async def _health(self, name: str) -> platform_pb2.HealthReport | None:
        assert self.bus is not None
        try:
            return await self.bus.request(subjects.health(name), platform_pb2.StatusRequest(),
                                          platform_pb2.HealthReport, timeout=0.5)
        except BusUnavailableError:
            return None
