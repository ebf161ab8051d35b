"""The local agent: local workloads ↔ bus (local mode, started by `alnair up`)."""

from __future__ import annotations

import asyncio
import socket
from typing import ClassVar

from alnair.v1 import commands_pb2, job_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import ConfigError, DurableConsumer, Service, ServiceSettings, TemporaryError, subjects
from alnair_gpu import MpsDaemons, NodeGpus
from alnair_lifecycle import LifecyclePublisher, Retention

from ._agent import Agent
from ._commands import LocalCommands
from ._inventory import discover, publish_inventory
from ._job_workers import JobWorkers
from ._retention import forget_expired
from ._settings import LocalAgentSettings


class LocalAgentService(Service):
    name = "local-agent"
    role = ("adapter: runs local workloads (`alnair run`) and training jobs' workers on the GPUs "
            "the scheduler picks, with the interceptor's environment; publishes the node inventory")
    settings_class: ClassVar[type[ServiceSettings]] = LocalAgentSettings

    def __init__(self, settings: LocalAgentSettings) -> None:
        super().__init__(settings)
        self.agent_settings = settings
        self.agent: Agent | None = None

    async def setup(self) -> None:
        assert self.bus is not None
        s = self.agent_settings
        if s.interceptor_lib is not None and not s.interceptor_lib.is_file():
            raise ConfigError(f"ALNAIR_INTERCEPTOR_LIB={s.interceptor_lib}: no such file; build "
                              "it with `make -C native/cuda_intercept`")
        gpus = discover(s.gpus).with_mps(s.mps)  # the inventory says how each card is shared
        inventory = await publish_inventory(self.bus, s.node_name, gpus)
        self.log.info("inventory published", node=s.node_name, gpus=len(inventory.gpus),
                      simulated=inventory.simulated)
        lifecycle = await LifecyclePublisher.open(
            self.bus, f"local-agent@{socket.gethostname()}")
        mps = await self._start_mps(gpus) if s.mps else None
        self.agent = Agent(self.bus, lifecycle, node=s.node_name, gpus=gpus,
                           workloads_dir=s.workloads_dir, interceptor=s.interceptor_lib, mps=mps)
        if mps is not None:
            self.spawn(mps.supervise(s.mps_check_seconds, self.agent.running_on), name="mps")
        found = await self.agent.recover()
        if found:
            self.log.info("workloads found again after a restart", count=found)
        self.spawn(self._apply_retention(lifecycle), name="retention")
        node = subjects.token(s.node_name)
        await self.consume(DurableConsumer(
            self.bus, stream="WORKLOADS", durable=f"local-agent-{node}-submit",
            subject=subjects.workload_submit(), message_type=wl.Workload,
            handler=self.agent.on_submit))
        await self.consume(DurableConsumer(
            self.bus, stream="SCHEDULING", durable=f"local-agent-{node}-bind",
            subject=subjects.sched_bind(), message_type=scheduling_pb2.BindDecision,
            handler=self.agent.on_bind))
        workers = JobWorkers(self.bus, self.agent, s.jobs_dir, stop_grace=s.worker_stop_grace_seconds)
        await self.consume(DurableConsumer(
            self.bus, stream="COMMANDS", durable=f"local-agent-{node}-workers",
            subject=subjects.wildcard("alnair.cmd.workers.<name>"), message_type=job_pb2.WorkerPlan,
            handler=workers.on_plan))
        self.spawn(workers.relay(), name="job-relay")
        commands = LocalCommands(self.bus, lifecycle, s.workloads_dir)
        for kind, subject, message_type, handler in (
            ("annotate", subjects.cmd_annotate(), commands_pb2.AnnotateCommand, commands.annotate),
            ("event", subjects.cmd_event(), commands_pb2.RecordEventCommand, commands.event),
            ("status", subjects.cmd_status(), commands_pb2.StatusUpdateCommand, commands.status),
        ):
            await self.consume(DurableConsumer(
                self.bus, stream="COMMANDS", durable=f"local-agent-{node}-{kind}",
                subject=subject, message_type=message_type, handler=handler))

    async def _start_mps(self, gpus: NodeGpus) -> MpsDaemons:
        s = self.agent_settings
        if s.interceptor_lib is None:
            raise ConfigError("MPS mode needs the interceptor: it sets each workload's MPS compute "
                              "and memory limits (set ALNAIR_INTERCEPTOR_LIB, or start without --mps)")
        daemons = MpsDaemons(s.mps_control, s.mps_dir, [g.uuid for g in gpus.gpus])
        await daemons.start()
        return daemons

    async def _apply_retention(self, lifecycle: LifecyclePublisher) -> None:
        """Forget finished workloads past their retention, now and then every check period;
        a failed round (the bus away) is retried on the next one."""
        s = self.agent_settings
        policy = Retention(s.workload_retention_seconds, s.keep_finished)
        rounds = 0
        while True:
            try:
                await forget_expired(lifecycle, s.workloads_dir, s.node_name, policy)
                if rounds % 60 == 0:  # markers are few; the purge lists them through a consumer
                    await lifecycle.kv.purge_deletes(s.workload_retention_seconds)
            except TemporaryError as e:
                self.log.info("retention round skipped", error=str(e))
            rounds += 1
            await asyncio.sleep(s.retention_check_seconds)

    async def teardown(self) -> None:
        if self.agent is not None:
            await self.agent.stop()
