"""The exporter service: sample every period, expose on ``/metrics``, publish on the bus.

The sampling loop runs the blocking work (NVML, region and cgroup files) in a worker thread
and swaps in an immutable :class:`NodeView`; scrapes only format the latest view, so a slow
scrape never delays a sample and a slow sample never blocks a scrape. A period that fails
is logged and counted and the next one runs: the exporter keeps serving what it last knew.

Workload identity comes from ``alnair.workload.events``, read from the start of the stream
on every start (a :class:`StreamFollower`, an ordered consumer), so a restarted exporter
knows every workload again.
A malformed or invalid event is counted in ``alnair_exporter_malformed_messages_total``,
logged, and dropped.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import Callable
from typing import Any

from alnair.v1 import workload_pb2
from alnair_common import AlnairError, DecodeError, NotCaughtUpError, Service, StreamFollower, subjects
from alnair_gpu import GpuSampler
from alnair_kubelet import KubeletError, PodResourcesClient

from ._allocations import PodAllocations
from ._exposition import MetricsServer
from ._host import HostReader
from ._identity import CgroupPodResolver, ChainResolver, PidResolver, WorkspacePidResolver
from ._region_scanner import RegionScanner
from ._sampler import NodeSampler
from ._settings import ExporterSettings
from ._sources import gpu_sampler
from ._stats import ExporterStats
from ._view import NodeView
from ._workload_pids import WorkloadPids
from ._workloads import InvalidWorkloadEvent, WorkloadDirectory, WorkloadUpdate
from .collectors import COLLECTORS

_UNSET: Any = object()


class ExporterService(Service):
    name = "exporter"
    role = ("measures GPUs (NVML or a replayed recording), per-process GPU use, CUDA regions and cgroups; "
            "per-pod metrics on /metrics and alnair.metrics.*")
    settings_class = ExporterSettings
    settings: ExporterSettings

    def __init__(self, settings: ExporterSettings, *, gpu: GpuSampler | None = _UNSET,
                 resolver: PidResolver | None = _UNSET, clock: Callable[[], float] = time.time) -> None:
        super().__init__(settings)
        self._gpu_seam = gpu
        self._resolver_seam = resolver
        self.clock = clock
        self.stats = ExporterStats()
        self.directory = WorkloadDirectory()
        self.metrics: MetricsServer | None = None
        self.view: NodeView | None = None
        self.sampler: NodeSampler | None = None
        self._gpu: GpuSampler | None = None
        self._workload_events: StreamFollower[workload_pb2.WorkloadEvent] | None = None
        self._unpublishable: set[str] = set()
        self._pod_resources: PodResourcesClient | None = None
        self._sample_problem: str | None = None
        self._sampling_lock = threading.Lock()
        self._allocation_problem: str | None = None

    async def setup(self) -> None:
        s = self.settings
        self._gpu = gpu_sampler(s) if self._gpu_seam is _UNSET else self._gpu_seam
        resolver = (ChainResolver(CgroupPodResolver(s.proc_root), WorkspacePidResolver(s.workspaces, s.proc_root))
                    if self._resolver_seam is _UNSET else self._resolver_seam)
        self.sampler = NodeSampler(
            s.node_name, gpu=self._gpu,
            scanner=RegionScanner(s.workspaces, self.directory, self.stats.region_skipped),
            directory=self.directory, resolver=resolver,
            host=HostReader(s.proc_root, s.cgroup_root),
            workload_pids=WorkloadPids(s.workspaces, s.proc_root, s.cgroup_root), grace_seconds=s.grace_seconds,
            host_period_seconds=s.host_period_seconds, clock=self.clock,
        )
        collectors = [collector(lambda: self.view) for collector in COLLECTORS]
        self.metrics = MetricsServer([*collectors, self.stats], s.metrics_host, s.metrics_port)
        try:
            port = await self.metrics.start()
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            # Two `alnair up` platforms on one machine (or a dev server) hold 9876: serve anyway,
            # loudly, rather than crash-looping under the supervisor.
            self.metrics = MetricsServer([*collectors, self.stats], s.metrics_host, 0)
            port = await self.metrics.start()
            self.log.warning("metrics port in use; serving on a free port instead", wanted=s.metrics_port,
                             port=port, fix="set ALNAIR_METRICS_PORT to a free port")
        self.log.info("serving metrics", url=f"http://{s.metrics_host}:{port}/metrics")
        assert self.bus is not None
        spec = next(s for s in subjects.STREAMS if "alnair.workload.>" in s.subjects)
        self._workload_events = StreamFollower(
            self.bus, stream=spec.name, subject=subjects.workload_events(),
            message_type=workload_pb2.WorkloadEvent, handler=self._on_workload_event,
            on_malformed=self._on_malformed_event)
        await self._workload_events.start()
        await self._catch_up_on_workloads(self._workload_events)
        self.health.checks["sampling"] = self._check_sampling
        self.spawn(self._sample_loop(), "sampling")
        if s.pod_resources_socket is not None:
            self._pod_resources = PodResourcesClient(s.pod_resources_socket)
            self.spawn(self._allocations_loop(self._pod_resources), "pod-resources")

    async def teardown(self) -> None:
        if self._workload_events is not None:
            await self._workload_events.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        if self._pod_resources is not None:
            await self._pod_resources.close()
        await asyncio.to_thread(self._close_gpu)

    def _close_gpu(self) -> None:
        """Close the GPU source once no sampling thread uses it (NVML must not shut down
        under a query still running in the worker thread)."""
        with self._sampling_lock:
            if self._gpu is not None:
                self._gpu.close()
                self._gpu = None
                if self.sampler is not None:
                    self.sampler.gpu = None

    def _sample_locked(self) -> NodeView:
        assert self.sampler is not None
        with self._sampling_lock:
            return self.sampler.sample()

    async def _catch_up_on_workloads(self, events: StreamFollower[workload_pb2.WorkloadEvent],
                                     timeout: float = 5.0) -> None:
        """Wait (bounded) until the event history is applied, so the first period already
        knows every workload instead of logging their regions as unknown."""
        try:
            await events.caught_up(timeout)
        except NotCaughtUpError as e:
            self.log.info("workload history not fully read yet; sampling anyway", error=str(e))

    def _on_malformed_event(self, subject: str, error: DecodeError) -> None:
        self.stats.message_malformed(subjects.workload_events(), "decode")
        self.log.warning("malformed workload event dropped", subject=subject, error=str(error))

    async def _on_workload_event(self, subject: str, event: workload_pb2.WorkloadEvent) -> None:
        try:
            update = WorkloadUpdate.from_proto(event)
        except InvalidWorkloadEvent as e:
            self.stats.message_malformed(subjects.workload_events(), "invalid")
            self.log.warning("invalid workload event dropped", subject=subject, error=str(e))
            return
        if update.node and update.node != self.settings.node_name:
            self.directory.forget(update.info.uid)  # placed on another node: not ours to measure
            return
        self.directory.apply(update, self.clock())

    async def sample_once(self) -> NodeView:
        """One period: measure (in a thread), swap the view, publish. Raises what sampling raised."""
        assert self.sampler is not None
        started = time.perf_counter()
        view = await asyncio.to_thread(self._sample_locked)
        self.view = view
        self.stats.samples += 1
        self.stats.simulated = view.simulated
        self.stats.last_sample_seconds = time.perf_counter() - started
        await self._publish(view)
        return view

    async def _sample_loop(self) -> None:
        period = self.settings.sample_period_seconds
        while True:
            started = time.monotonic()
            try:
                await self.sample_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - one bad period must not stop the exporter
                self.stats.sample_errors += 1
                if str(e) != self._sample_problem:  # once per distinct failure, not every period
                    self._sample_problem = str(e)
                    self.log.exception("sampling period failed; serving the last view", error=str(e))
            else:
                if self._sample_problem is not None:
                    self.log.info("sampling recovered", after=self._sample_problem)
                    self._sample_problem = None
            await asyncio.sleep(max(0.0, period - (time.monotonic() - started)))

    async def _allocations_loop(self, client: PodResourcesClient) -> None:
        """Poll the kubelet's PodResources every host period; a failure keeps the last answer."""
        period = max(1.0, self.settings.host_period_seconds)
        while True:
            try:
                allocations = PodAllocations.from_snapshot(await client.list())
            except KubeletError as e:
                self.stats.pod_resources_errors += 1
                if str(e) != self._allocation_problem:
                    self._allocation_problem = str(e)
                    self.log.warning("pod allocations unavailable; keeping the last ones", error=str(e))
            else:
                if allocations.ignored_ids and self._allocation_problem != "ids":
                    self._allocation_problem = "ids"
                    self.log.warning("device IDs that name no card ignored", count=allocations.ignored_ids,
                                     expected="<GPU UUID>-m<k> or <GPU UUID>-c<k>")
                if self.sampler is not None:
                    self.sampler.allocations = allocations
            await asyncio.sleep(period)

    async def _publish(self, view: NodeView) -> None:
        assert self.bus is not None
        node = self.settings.node_name
        try:
            await self.bus.publish(subjects.gpu_metrics(node), view.batch())
        except AlnairError as e:
            self._publish_failed(f"node:{node}", str(e))
        for usage in view.fresh_cuda:
            try:
                subject = subjects.cuda_metrics(node, usage.workload.uid)
                await self.bus.publish(subject, usage.to_proto(node, view.sampled_at))
            except AlnairError as e:
                self._publish_failed(usage.workload.uid, str(e))

    def _publish_failed(self, key: str, error: str) -> None:
        self.stats.publish_errors += 1
        if key not in self._unpublishable:
            self._unpublishable.add(key)
            self.log.warning("sample not published", key=key, error=error)

    async def _check_sampling(self) -> str | None:
        view, period = self.view, self.settings.sample_period_seconds
        if view is None:
            return "no sample taken yet"
        age = self.clock() - view.sampled_at
        if age > max(10 * period, 5.0):
            return f"last sample is {age:.1f} s old (period {period:.2f} s)"
        return None
