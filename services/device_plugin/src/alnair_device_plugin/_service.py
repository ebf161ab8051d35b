"""The device plugin service: fractional GPUs for the kubelet, fed by the scheduler's decisions.

Start-up order matters: the GPU source and the assignment index first (a restarted plugin
knows every assignment it had), then the bus consumers (decisions made while it was down are
delivered now), then the kubelet sockets — so the first Allocate already sees everything.

MPS mode (``ALNAIR_MPS``): the control daemons start before the inventory is published. A
card whose daemon does not answer is published and advertised **unhealthy** (reason: the
daemon's), not quietly time-sliced: its pods were placed expecting an SM partition, the
interceptor would fall back to its throttle without telling anyone, and a card the node
says is MPS must be one. The supervisor keeps starting it; when it answers the card is
healthy again. A missing control program stops the plugin (ConfigError): the node is set
up wrong. The daemons are asked to quit on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re

from alnair.v1 import inventory_pb2, scheduling_pb2, workload_pb2
from alnair_common import (
    ConfigError,
    DurableConsumer,
    NotCaughtUpError,
    PermanentError,
    Service,
    TypedKV,
    publish_error,
    subjects,
)
from alnair_gpu import GpuError, InventorySource, MpsDaemons, NodeGpus, to_proto
from alnair_kubelet import ContainerDevices, KubeletError, PodResourcesClient

from . import _metrics
from ._allocator import Allocator, ContainerPaths
from ._assignments import Assignment, AssignmentIndex, committed_assignment
from ._device_state import DeviceState
from ._kubelet_link import KubeletLink
from ._plugin_server import ResourcePlugin
from ._reconciler import PodResourcesReconciler
from ._settings import DevicePluginSettings, open_source
from ._units import Resource
from ._workspace import Workspaces

# Root's; every container of the card reads its pipe directory (the user is not known at Allocate).
MPS_DIRECTORY_MODE = 0o755
ENDED = (workload_pb2.WORKLOAD_PHASE_SUCCEEDED, workload_pb2.WORKLOAD_PHASE_FAILED,
         workload_pb2.WORKLOAD_PHASE_DELETED)


class DevicePluginService(Service):
    name = "device-plugin"
    role = "kubelet device plugin for alnair/vgpu-memory and alnair/vgpu-compute; publishes the node's GPUs"
    settings_class = DevicePluginSettings
    settings: DevicePluginSettings

    def __init__(self, settings: DevicePluginSettings, source: InventorySource | None = None) -> None:
        super().__init__(settings)
        self.node = settings.node_name
        self.source = source
        self.index: AssignmentIndex | None = None
        self.workspaces: Workspaces | None = None
        self.state: DeviceState | None = None
        self.link: KubeletLink | None = None
        self.reconciler: PodResourcesReconciler | None = None
        self._health_task: asyncio.Task[None] | None = None
        self._link_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._inventory_kv: TypedKV[inventory_pb2.NodeInventory] | None = None
        self.mps: MpsDaemons | None = None
        self._mps_task: asyncio.Task[None] | None = None

    async def setup(self) -> None:
        s = self.settings
        assert self.bus is not None
        if self.source is None:
            try:
                self.source = await asyncio.to_thread(open_source, s.gpus)
            except GpuError as e:
                raise ConfigError(f"ALNAIR_GPUS={s.gpus!r}: {e}") from e
        if s.mps:
            self.mps = MpsDaemons(s.mps_control, s.mps_dir, [g.uuid for g in self.source.inventory().gpus],
                                  directory_mode=MPS_DIRECTORY_MODE, off_hint="set ALNAIR_MPS=false",
                                  answer_seconds=s.mps_answer_seconds)
            await self.mps.start_each()
        gpus = self._effective()
        self.state = DeviceState(gpus)
        self.index = AssignmentIndex(s.state_dir)
        self.workspaces = Workspaces(s.workspace_root)
        self._remove_orphan_workspaces()
        self._inventory_kv = await TypedKV.open(self.bus, subjects.NODE_INVENTORY_BUCKET, inventory_pb2.NodeInventory)
        await self.publish_inventory(gpus)

        durable = "device-plugin-" + re.sub(r"[^A-Za-z0-9_-]", "_", self.node)
        consumers = [
            await self.consume(DurableConsumer(
                self.bus, stream="SCHEDULING", durable=durable, subject=subjects.sched_bind(),
                message_type=scheduling_pb2.BindDecision, handler=self._on_bind, max_deliver=10,
                ack_wait=30.0)),
            await self.consume(DurableConsumer(
                self.bus, stream="WORKLOADS", durable=f"{durable}-workloads",
                subject=subjects.workload_events(), message_type=workload_pb2.WorkloadEvent,
                handler=self._on_workload_event, max_deliver=10, ack_wait=30.0)),
        ]

        allocator = Allocator(self.index, self.workspaces, ContainerPaths(
            interceptor_host=s.interceptor_host_path, interceptor_container=s.interceptor_container_path,
            workspace_container=s.workspace_container_path), gpus=lambda: self._current().gpus,
            mps_pipe_directory=self.mps.pipe_directory if self.mps else None)
        plugins = [ResourcePlugin(r, self.state, allocator, assignment_wait_seconds=s.assignment_wait_seconds)
                   for r in Resource]
        await self._catch_up(consumers, timeout=10.0)
        self.link = KubeletLink(s.device_plugin_dir, plugins, poll_seconds=s.kubelet_poll_seconds)
        self.health.checks["kubelet"] = self._check_kubelet
        self._link_task = self.spawn(self.link.run(self._stopping), "kubelet-link")
        self._health_task = self.spawn(self._watch_health(), "gpu-health")
        if self.mps is not None:
            self._mps_task = self.spawn(self.mps.supervise(s.mps_check_seconds, self._running_on,
                                                           on_change=self._inventory_changed), "mps")
        if s.reconcile_seconds > 0:
            self.reconciler = PodResourcesReconciler(
                PodResourcesClient(s.pod_resources_socket, timeout=5.0), self.index, self.workspaces,
                grace_seconds=s.stale_grace_seconds, on_mismatch=self._identity_mismatch)
            self.spawn(self._reconcile(s.reconcile_seconds), "podresources-reconcile")

    async def _catch_up(self, consumers: list[DurableConsumer], *, timeout: float) -> None:
        """Serve the kubelet only once the decisions made while we were down are indexed, so
        the first Allocate after a restart does not miss them; give up waiting after ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            for consumer in consumers:
                await consumer.caught_up(max(0.0, deadline - asyncio.get_running_loop().time()))
        except NotCaughtUpError as e:
            self.log.warning("serving the kubelet before the bus backlog was indexed", error=str(e),
                             waited_seconds=timeout)

    async def teardown(self) -> None:
        self._stopping.set()
        if self.reconciler is not None:
            await self.reconciler.client.close()
        # Let both loops end by themselves before the runtime cancels tasks: the health thread
        # may sit in NVML's event wait (≤ 0.5 s) and must not have the event set freed under
        # it; the kubelet link must finish stopping its gRPC servers (a cancelled stop leaves a
        # server running on a socket).
        running = [t for t in (self._health_task, self._link_task) if t is not None]
        if running:
            await asyncio.wait(running, timeout=5.0)
        if self.mps is not None:
            if self._mps_task is not None:  # no restart of a daemon being stopped
                self._mps_task.cancel()
                await asyncio.gather(self._mps_task, return_exceptions=True)
            await self.mps.stop()
        if self.source is not None:
            self.source.close()

    def _current(self) -> DeviceState:
        assert self.state is not None
        return self.state

    def _effective(self) -> NodeGpus:
        """The source's inventory as this node shares it: in MPS mode every card says so, and
        one whose daemon does not answer is unhealthy."""
        assert self.source is not None
        gpus = self.source.inventory()
        if self.mps is None:
            return gpus
        gpus = gpus.with_mps()
        return dataclasses.replace(gpus, gpus=tuple(
            g.with_health(False, f"MPS control daemon not answering: {self.mps.down[g.uuid]}")
            if g.uuid in self.mps.down else g for g in gpus.gpus))

    async def _inventory_changed(self) -> None:
        gpus = self._effective()
        await self._current().update(gpus)
        await self.publish_inventory(gpus)

    def _running_on(self, gpu_uuid: str) -> list[str]:
        """The workloads assigned to this card (an MPS server fault ends them all)."""
        assert self.index is not None
        return [a.workload_id for a in self.index.all() if a.gpu_uuid == gpu_uuid]

    async def publish_inventory(self, gpus: NodeGpus) -> None:
        """The full inventory on ``alnair.node.<node>.inventory`` and in ``node_inventory``."""
        assert self.bus is not None and self._inventory_kv is not None
        message = to_proto(gpus, self.node)
        _metrics.UNHEALTHY_GPUS.set(sum(not g.healthy for g in gpus.gpus))
        await self._inventory_kv.put(self.node, message)
        await self.bus.publish(subjects.node_inventory(self.node), message)

    async def _watch_health(self) -> None:
        assert self.source is not None
        while not self._stopping.is_set():
            event = await asyncio.to_thread(self.source.wait_health_event, 0.5)
            if event is None:
                continue
            self.log.warning("GPU health changed", gpu=event.uuid, healthy=event.healthy, reason=event.reason,
                             xid=event.xid)
            await self._inventory_changed()

    async def _on_bind(self, _: str, decision: scheduling_pb2.BindDecision) -> None:
        if decision.assignment.node != self.node:
            return
        assert self.bus is not None
        # Only a share the scheduler committed is handed to a container (a forged decision,
        # or one over the card's capacity, is refused, counted and terminated).
        self._keep(await committed_assignment(self.bus, decision.workload, decision.assignment,
                                              self._current().gpus))

    async def _on_workload_event(self, _: str, event: workload_pb2.WorkloadEvent) -> None:
        assert self.index is not None and self.workspaces is not None
        workload = event.workload
        uid = workload.ref.uid
        if workload.phase in ENDED:
            if self.index.get(uid) is not None or workload.node == self.node:
                self.index.end(uid)
                if self.workspaces.remove(uid):
                    phase = workload_pb2.WorkloadPhase.Name(workload.phase)
                    self.log.info("workspace removed", workload=uid, phase=phase)
            return
        if workload.HasField("assignment") and workload.assignment.node == self.node:
            # The event's assignment comes from the pod's annotation, which a tenant may write.
            self._keep(await committed_assignment(self.bus, workload.ref, workload.assignment,
                                                  self._current().gpus))

    def _keep(self, assignment: Assignment) -> None:
        assert self.index is not None
        if self._current().gpus.by_uuid(assignment.gpu_uuid) is None:
            raise PermanentError(
                f"assignment of {assignment.workload_id} names GPU {assignment.gpu_uuid}, which node {self.node} "
                f"does not have ({', '.join(g.uuid for g in self._current().gpus.gpus)})")
        if self.index.add(assignment):
            self.log.info("assignment kept", workload=assignment.workload_id, gpu=assignment.gpu_uuid,
                          memory_gib=assignment.memory_gib, compute_percent=assignment.compute_percent)

    async def _reconcile(self, period: float) -> None:
        assert self.reconciler is not None
        unavailable_logged = False
        while not self._stopping.is_set():
            try:
                result = await self.reconciler.run_once()
                unavailable_logged = False
                for uid in result.removed:
                    self.log.info("workspace removed: the kubelet no longer lists its devices", workload=uid)
            except KubeletError as e:
                if not unavailable_logged:
                    self.log.info("PodResources check skipped", error=str(e))
                    unavailable_logged = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), period)

    async def _identity_mismatch(self, assignment: Assignment, owner: ContainerDevices) -> None:
        assert self.bus is not None
        message = (f"units allocated for {assignment.workload_id} on {assignment.gpu_uuid} are held by "
                   f"{owner.namespace}/{owner.pod} (container {owner.container}) according to the kubelet; "
                   "its workspace and ALNAIR_WORKLOAD_ID name the other pod")
        self.log.error("identity mismatch", workload=assignment.workload_id, holder=f"{owner.namespace}/{owner.pod}")
        await publish_error(self.bus, code="identity-mismatch", message=message, obj=f"{owner.namespace}/{owner.pod}",
                            permanent=False)

    def _remove_orphan_workspaces(self) -> None:
        """After a restart: a workspace whose workload is no longer assigned here is left over."""
        assert self.index is not None and self.workspaces is not None
        for uid in self.workspaces.existing():
            if self.index.get(uid) is None:
                self.workspaces.remove(uid)
                self.log.info("orphan workspace removed", workload=uid)

    async def _check_kubelet(self) -> str | None:
        if self.link is not None and self.link.registered.is_set():
            return None
        return f"not registered with the kubelet at {self.settings.device_plugin_dir / 'kubelet.sock'}"
