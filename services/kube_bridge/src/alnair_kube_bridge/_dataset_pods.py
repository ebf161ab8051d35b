"""Pods that read cached data sets, from their annotations (``alnair_common.dataset_refs``).

Fed by the pod watch kube-bridge already runs. For each pod that is not finished:

* the seed's form (``cacheDataset: "yes"`` over hostPath volumes) asks the hydrator for each
  volume's data set (source ``file://<hostPath>``, owner the pod's service account, its
  namespace), unless the bus already holds it pending, hydrating or ready — so the pod's data
  are hydrated while it starts;
* Alnair's form (``ai.centaurus.io/dataset: a,b``) names data sets that must exist: a name
  that is neither a Dataset of the pod's namespace nor known to the hydrator gets a Warning
  Event ``DatasetNotFound`` on the pod saying what to create;
* a malformed annotation gets a Warning Event ``DatasetAnnotationInvalid`` with the parser's
  text. Bad input is reported, never raised past this module.

Events are named after the pod's uid and what they say (``_kube_events``), so a relist or a
restarted bridge records none twice. Which data sets running pods read is kept here and
every change (a pod starts reading, ends, goes) is handed to ``touched`` — the Dataset side
updates InUse and completes a deferred deletion. Whether a Dataset may go is decided from a
fresh pod list (:func:`readers`), not from this cache, which a restart empties.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from alnair.v1 import cache_pb2
from alnair_common import Bus, PermanentError, TypedKV, get_logger, subjects
from alnair_common.annotations import DATASET, SEED_CACHE_DATASET
from alnair_common.dataset_refs import DatasetRef, DatasetRefError, pod_datasets, pod_host_paths

from ._custom_objects import CustomObjects
from ._kube_errors import api_call
from ._kube_events import record_event
from ._watch import Changed, Synced

log = get_logger("alnair.kube-bridge.dataset-pods")
Obj = dict[str, Any]
FINISHED = frozenset({"Succeeded", "Failed"})
LIVE = frozenset({cache_pb2.CACHE_PHASE_PENDING, cache_pb2.CACHE_PHASE_HYDRATING,
                  cache_pb2.CACHE_PHASE_READY})
Touched = Callable[..., Awaitable[None]]  # (namespace, *names)


def pod_refs(pod: Obj) -> list[DatasetRef]:
    """The data sets ``pod`` reads; DatasetRefError for a malformed annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if DATASET not in annotations and SEED_CACHE_DATASET not in annotations:
        return []
    return pod_datasets(annotations, pod_host_paths(pod.get("spec") or {}))


def is_finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED


def readers(pods: Iterable[Obj], name: str) -> list[str]:
    """Names of the pods of ``pods`` that are not finished and read data set ``name``."""
    out = []
    for pod in pods:
        if is_finished(pod):
            continue
        try:
            if any(ref.name == name for ref in pod_refs(pod)):
                out.append(str(pod["metadata"]["name"]))
        except DatasetRefError:
            continue
    return out


def cache_key(namespace: str, name: str) -> str:
    """The hydrator's key of a data set (its bucket key, its status subject's token)."""
    return f"{namespace}.{name}" if namespace else name


class DatasetPods:
    def __init__(self, bus: Bus, api_client: k8s.ApiClient, kv: TypedKV[cache_pb2.CacheDatasetStatus],
                 datasets: CustomObjects, touched: Touched,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.bus = bus
        self.core = k8s.CoreV1Api(api_client)
        self.kv = kv
        self.datasets = datasets
        self.touched = touched
        self.clock = clock
        # pod uid → (namespace, names it reads): pods not finished only; and the annotations
        # handled per pod uid (a pod's other changes do not repeat the work).
        self.reading: dict[str, tuple[str, frozenset[str]]] = {}
        self._seen: dict[str, tuple[str | None, str | None]] = {}

    async def handle(self, item: Synced | Changed) -> None:
        if isinstance(item, Synced):
            before = self.reading
            self.reading, self._seen = {}, {}
            for pod in item.items:
                await self._guarded(pod)
            for uid, (namespace, names) in before.items():
                if uid not in self.reading:
                    await self.touched(namespace, *names)
            return
        if item.type == "DELETED":
            await self._end(str((item.obj.get("metadata") or {}).get("uid", "")))
            return
        await self._guarded(item.obj)

    async def _guarded(self, pod: Obj) -> None:
        try:
            await self._pod(pod)
        except PermanentError as e:  # the API refused for good: logged, the pod's next event retries
            meta = pod.get("metadata") or {}
            log.error("dataset pod not handled", pod=f"{meta.get('namespace')}/{meta.get('name')}",
                      error=str(e))

    async def _pod(self, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        uid, namespace = str(meta.get("uid", "")), str(meta.get("namespace") or "default")
        if is_finished(pod):
            await self._end(uid)
            return
        annotations = meta.get("annotations") or {}
        said = (annotations.get(DATASET), annotations.get(SEED_CACHE_DATASET))
        if said == (None, None):
            await self._end(uid)
            return
        if self._seen.get(uid) == said:
            return  # its annotations were handled; a pod's other changes are not news here
        self._seen[uid] = said
        try:
            refs = pod_refs(pod)
        except DatasetRefError as e:
            await self._warn(pod, "DatasetAnnotationInvalid", str(e), key=f"invalid.{said}")
            await self._end(uid)
            return
        names = frozenset(ref.name for ref in refs)
        before = self.reading.get(uid)
        self.reading[uid] = (namespace, names)
        for ref in refs:
            if ref.source:
                await self._hydrate(pod, ref)
            else:
                await self._check_exists(pod, ref)
        await self.touched(namespace, *(names | (before[1] if before else frozenset())))

    async def _end(self, uid: str) -> None:
        self._seen.pop(uid, None)
        gone = self.reading.pop(uid, None)
        if gone is not None:
            await self.touched(gone[0], *gone[1])

    async def _known(self, namespace: str, name: str) -> cache_pb2.CacheDatasetStatus | None:
        found = await self.kv.get(cache_key(namespace, name))
        return None if found is None else found.value

    async def _hydrate(self, pod: Obj, ref: DatasetRef) -> None:
        """Ask for the seed form's hostPath data set, unless the hydrator has it in hand."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        namespace = str(meta.get("namespace") or "default")
        known = await self._known(namespace, ref.name)
        if known is not None and known.phase in LIVE and known.spec.source == ref.source:
            return
        request_id = f"pod.{meta.get('uid')}.{ref.name}"
        owner = str(spec.get("serviceAccountName") or "default")
        await self.bus.publish(subjects.cache_requests(), cache_pb2.CacheDatasetRequest(
            request_id=request_id, add=cache_pb2.CacheDatasetSpec(
                name=ref.name, namespace=namespace, owner=owner, source=ref.source)),
            msg_id=f"cache:{request_id}")
        log.info("hostPath data set requested for a pod", pod=f"{namespace}/{meta.get('name')}",
                 dataset=ref.name, source=ref.source, volume=ref.volume)

    async def _check_exists(self, pod: Obj, ref: DatasetRef) -> None:
        namespace = str(pod["metadata"].get("namespace") or "default")
        if await self._known(namespace, ref.name) is not None:
            return
        if await asyncio.to_thread(self.datasets.get, namespace, ref.name) is not None:
            return
        message = (f"the pod reads data set {ref.name!r} ({DATASET}), but namespace {namespace} "
                   f"has no Dataset {ref.name!r} and the cache does not know it: create it, e.g. "
                   f"`kubectl -n {namespace} apply -f -` with apiVersion: alnair.centaurus.io/v1, "
                   f"kind: Dataset, metadata.name: {ref.name}, spec.source: s3://bucket/prefix or "
                   "file:///path; until then the pod reads from wherever its code points")
        await self._warn(pod, "DatasetNotFound", message, key=f"missing.{ref.name}")

    async def _warn(self, pod: Obj, reason: str, message: str, *, key: str) -> None:
        meta = pod["metadata"]
        involved = k8s.V1ObjectReference(api_version="v1", kind="Pod", name=meta["name"],
                                         namespace=meta.get("namespace"), uid=meta.get("uid"))
        where = f"record event {reason} on pod {meta.get('namespace')}/{meta['name']}"
        await asyncio.to_thread(api_call, where, lambda: record_event(
            self.core, involved, type="Warning", reason=reason, message=message,
            key=f"dataset.{meta.get('uid')}.{key}", when=self.clock()))
        log.warning("dataset annotation problem", pod=f"{meta.get('namespace')}/{meta['name']}",
                    reason=reason, message=message)
