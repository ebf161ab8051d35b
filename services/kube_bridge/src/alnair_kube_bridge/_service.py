"""kube-bridge: Kubernetes ↔ bus.

Watches Alnair's pods and PodGroups and publishes their lifecycle; carries out bind
decisions and commands from the bus, and training jobs' WorkerPlans (their worker pods,
rendezvous and PodGroups: ``_job_workers``), relaying their rendezvous rounds
(``_job_rounds``); serves TrainingJob objects: submitted to the elastic-job controller and
deleted from it, their status written from the job's states (``_training_jobs``); serves
Dataset objects and the pods' dataset annotations: sent to the cache hydrator, their status
written from its reports, a deletion deferred while running pods read the data set
(``_datasets``, ``_dataset_pods``). Safe to
run twice: both copies compute the same event ids and compare-and-set the same records
(duplicates are dropped), and the command consumers are shared durables (each command
reaches one copy).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, ClassVar

from kubernetes import client as k8s

from alnair.v1 import cache_pb2, commands_pb2, job_pb2, platform_pb2, scheduling_pb2
from alnair_common import DurableConsumer, Service, ServiceSettings, TypedKV, subjects
from alnair_lifecycle import LifecyclePublisher

from ._binder import Binder
from ._commands import Commands
from ._dataset_crd import GROUP as DATASETS_GROUP
from ._dataset_crd import PLURAL as DATASETS_PLURAL
from ._dataset_crd import VERSION as DATASETS_VERSION
from ._dataset_pods import DatasetPods
from ._datasets import Datasets
from ._job_rounds import RoundsRelay
from ._job_steps import StepsRelay
from ._job_workers import JobWorkers
from ._kube_client import api_client
from ._lanes import drain
from ._lost_nodes import LostNodes
from ._nodes import NodeEvents
from ._podgroups import PodGroupEvents
from ._settings import KubeBridgeSettings
from ._training_job_spec import GROUP as JOBS_GROUP
from ._training_job_spec import PLURAL as JOBS_PLURAL
from ._training_job_spec import VERSION as JOBS_VERSION
from ._training_jobs import TrainingJobs
from ._watch import Changed, ResourceWatch, Synced
from ._workloads import PodLifecycle, forget_deleted_pods

Item = Synced | Changed


class KubeBridgeService(Service):
    name = "kube-bridge"
    role = ("adapter: Kubernetes pods and PodGroups → workload/podgroup events, deleted nodes "
            "→ inventories retracted; bind decisions, annotate/event/status commands and "
            "training jobs' worker plans → Kubernetes API; rendezvous rounds → the bus; "
            "TrainingJob objects ↔ job commands and states; Dataset objects and pods' dataset "
            "annotations ↔ cache requests and status")
    settings_class: ClassVar[type[ServiceSettings]] = KubeBridgeSettings
    # Not leader-elected: replicas are safe side by side (tests/integration/kube_bridge/
    # test_kb_replicas.py) — every publish is de-duplicated by its message id and the
    # lifecycle records are compare-and-set, and binds are shared through one durable
    # consumer — so a second replica takes over with no delay at all; a standby would add one.

    def __init__(self, settings: KubeBridgeSettings) -> None:
        super().__init__(settings)
        self.kube_settings = settings
        self.watches: list[ResourceWatch] = []
        self._threads: list[threading.Thread] = []
        self._synced: set[str] = set()
        self.api: k8s.ApiClient | None = None
        self.binder: Binder | None = None
        self.rounds: RoundsRelay | None = None
        self.steps: StepsRelay | None = None

    async def setup(self) -> None:
        assert self.bus is not None
        s = self.kube_settings
        self.api = api_client(s)
        core = k8s.CoreV1Api(self.api)
        custom = k8s.CustomObjectsApi(self.api)
        ns = s.watch_namespace
        lifecycle = await LifecyclePublisher.open(self.bus, "kube-bridge")
        pods = PodLifecycle(lifecycle, scheduler_name=s.scheduler_name, namespace=ns)
        self.spawn(forget_deleted_pods(lifecycle, s.deleted_retention_seconds,
                                       s.retention_check_seconds), "retention")
        groups = await PodGroupEvents.open(self.bus, ns)
        group, version = "alnair.centaurus.io", "v1alpha1"
        jobs_api = (JOBS_GROUP, JOBS_VERSION)
        datasets_api = (DATASETS_GROUP, DATASETS_VERSION)
        if ns:
            list_pods = partial(core.list_namespaced_pod, ns)
            list_groups = partial(custom.list_namespaced_custom_object, group, version, ns,
                                  "podgroups")
            list_jobs = partial(custom.list_namespaced_custom_object, *jobs_api, ns, JOBS_PLURAL)
            list_datasets = partial(custom.list_namespaced_custom_object, *datasets_api, ns,
                                    DATASETS_PLURAL)
        else:
            list_pods = core.list_pod_for_all_namespaces
            list_groups = partial(custom.list_cluster_custom_object, group, version, "podgroups")
            list_jobs = partial(custom.list_cluster_custom_object, *jobs_api, JOBS_PLURAL)
            list_datasets = partial(custom.list_cluster_custom_object, *datasets_api, DATASETS_PLURAL)
        nodes = await NodeEvents.open(self.bus, LostNodes(core, ns))
        training_jobs = TrainingJobs(self.bus, self.api, ns)
        datasets = Datasets(self.bus, self.api, ns)
        statuses = await TypedKV.open(self.bus, subjects.CACHE_DATASETS_BUCKET, cache_pb2.CacheDatasetStatus)
        dataset_pods = DatasetPods(self.bus, self.api, statuses, datasets.objects, datasets.touched)

        async def pod_handle(item: Item) -> None:  # both idempotent: a retry repeats both
            await pods.handle(item)
            await dataset_pods.handle(item)

        self._watch("pods", list_pods, pod_handle, lanes=s.pod_event_lanes)
        self._watch("nodes", core.list_node, nodes.handle)
        self._watch("podgroups", list_groups, groups.handle)
        self._watch("trainingjobs", list_jobs, training_jobs.handle)
        self._watch("datasets", list_datasets, datasets.handle)
        self.health.checks["kubernetes"] = self._check_synced

        self.binder = binder = Binder(self.bus, core, ns, concurrency=s.bind_concurrency)
        commands = Commands(self.bus, self.api, ns)
        await self.consume(DurableConsumer(
            self.bus, stream="SCHEDULING", durable="kube-bridge-bind",
            subject=subjects.sched_bind(), message_type=scheduling_pb2.BindDecision,
            handler=binder.handle, concurrency=s.bind_concurrency))
        for durable, subject, message_type, handler in (
            ("kube-bridge-annotate", subjects.cmd_annotate(), commands_pb2.AnnotateCommand,
             commands.annotate),
            ("kube-bridge-event", subjects.cmd_event(), commands_pb2.RecordEventCommand,
             commands.event),
            ("kube-bridge-status", subjects.cmd_status(), commands_pb2.StatusUpdateCommand,
             commands.status),
        ):
            await self.consume(DurableConsumer(
                self.bus, stream="COMMANDS", durable=durable, subject=subject,
                message_type=message_type, handler=handler))
        # The jobs' states and the controller's refusals → the TrainingJobs' status.
        await self.consume(DurableConsumer(
            self.bus, stream="JOBS", durable="kube-bridge-job-states",
            subject=subjects.wildcard("alnair.job.<name>.state"), message_type=job_pb2.JobState,
            handler=training_jobs.on_state))
        await self.consume(DurableConsumer(
            self.bus, stream="ERRORS", durable="kube-bridge-job-refusals",
            subject=subjects.error("elastic-job"), message_type=platform_pb2.ErrorEvent,
            handler=training_jobs.on_error))
        # The cache hydrator's reports → the Datasets' status.
        await self.consume(DurableConsumer(
            self.bus, stream="CACHE", durable="kube-bridge-cache-status",
            subject=subjects.wildcard("alnair.cache.<dataset>.status"),
            message_type=cache_pb2.CacheDatasetStatus, handler=datasets.on_status))
        workers = JobWorkers(self.api, namespace=ns, scheduler_name=s.scheduler_name, bus=self.bus)
        await self.consume(DurableConsumer(
            self.bus, stream="COMMANDS", durable="kube-bridge-workers",
            subject=subjects.wildcard("alnair.cmd.workers.<name>"), message_type=job_pb2.WorkerPlan,
            handler=workers.on_plan))
        self.rounds = RoundsRelay(self.bus, self.api, namespace=ns,
                                  every_seconds=s.rendezvous_relay_seconds)
        self.spawn(self.rounds.run(), name="rendezvous-rounds")
        self.steps = StepsRelay(self.bus, self.api, namespace=ns,
                                every_seconds=s.rendezvous_relay_seconds)
        self.spawn(self.steps.run(), name="training-steps")

    def _watch(self, kind: str, list_call: Callable[..., Any],
               handle: Callable[[Item], Awaitable[None]], *, lanes: int = 1) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Item] = asyncio.Queue()
        watch = ResourceWatch(kind, list_call,
                              lambda item: loop.call_soon_threadsafe(queue.put_nowait, item),
                              watch_timeout_seconds=self.kube_settings.watch_timeout_seconds)
        thread = threading.Thread(target=watch.run, name=f"watch-{kind}", daemon=True)
        self.watches.append(watch)
        self._threads.append(thread)
        thread.start()
        self.spawn(drain(kind, queue, handle, lanes=lanes, synced=self._synced.add),
                   name=f"events-{kind}")

    async def _check_synced(self) -> str | None:
        missing = sorted({w.kind for w in self.watches} - self._synced)
        return f"initial list not yet published: {', '.join(missing)}" if missing else None

    async def teardown(self) -> None:
        for watch in self.watches:
            watch.stop()
        for thread in self._threads:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(thread.join, self.kube_settings.watch_timeout_seconds + 5)
        if self.binder is not None:
            self.binder.close()
        if self.api is not None:
            self.api.close()
