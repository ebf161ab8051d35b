"""Dataset objects (``alnair.centaurus.io/v1``) ↔ the cache hydrator.

A Dataset's spec goes to the hydrator once per ``metadata.generation``: its watch event (or a
relist) finds ``status.observedGeneration`` behind, so the bridge holds it with the
finalizer ``alnair.centaurus.io/dataset``, publishes ``CacheDatasetRequest{add}`` (request id
``cr.<uid>.<generation>``, message id ``cache:<request id>``: a redelivered event or a second
bridge is stored once) and records the generation. Only ``pin`` and ``replicas`` can change
(the CRD refuses the rest); the hydrator applies such an add to the data set in place.

The hydrator's reports (``alnair.cache.<namespace>.<name>.status``, through a durable
consumer: a restarted bridge reads what it missed) become the object's status
(``_dataset_status``). Reports of another data set of the name are not written: another
object's requests (``cr.<other uid>.…``), another source, or observed before the object
existed.

Deleting a Dataset that running pods read is deferred: the finalizer holds the object, and
condition DeletionDeferred names the pods, until no pod that has not finished reads it (a
fresh pod list decides, not a cache). Then ``CacheDatasetRequest{remove}`` (``cr.<uid>.
delete``) is published and the finalizer dropped. The pod watch hands every change in who
reads what to :meth:`Datasets.touched`, which updates InUse and completes a deferred deletion;
a restarted bridge's relist checks every deleted object again.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse

from kubernetes import client as k8s

from alnair.v1 import cache_pb2
from alnair_common import Bus, PermanentError, get_logger, subjects
from alnair_common.dataset_refs import DatasetRefError, check_name

from . import _dataset_status as st
from ._custom_objects import CustomObjects
from ._custom_objects import object_key as dataset_key
from ._dataset_crd import GROUP, KIND, PLURAL, VERSION
from ._dataset_pods import readers
from ._kube_errors import api_json
from ._watch import Changed, Synced

FINALIZER = f"{GROUP}/dataset"
# The hydrator's clock (observed_at) against the apiserver's (creationTimestamp).
CLOCK_SKEW = timedelta(seconds=2)
log = get_logger("alnair.kube-bridge.datasets")
Obj = dict[str, Any]


def dataset_spec(obj: Obj) -> cache_pb2.CacheDatasetSpec:
    """The hydrator's spec of a Dataset object; PermanentError saying what it cannot read."""
    namespace, name = dataset_key(obj)
    where = f"Dataset {namespace}/{name}"
    spec = obj.get("spec") or {}
    try:
        check_name(name)
        source = str(spec["source"])
        if urlparse(source).scheme not in ("s3", "file"):
            raise PermanentError(f"{where}: spec.source {source!r} must be s3://bucket[/prefix] "
                                 "or file:///absolute/path")
        return cache_pb2.CacheDatasetSpec(
            name=name, namespace=namespace, owner=f"{KIND} {namespace}/{name}", source=source,
            include=[str(p) for p in spec.get("include") or []],
            exclude=[str(p) for p in spec.get("exclude") or []], pin=bool(spec.get("pin")),
            replicas=int(spec.get("replicas") or 1), tier=str(spec.get("tier") or "redis"))
    except DatasetRefError as e:
        raise PermanentError(f"{where}: {e}") from e
    except KeyError as e:
        raise PermanentError(f"{where}: spec.{e.args[0]} is missing") from e
    except (TypeError, ValueError) as e:
        raise PermanentError(f"{where}: the spec does not have the CRD's types: {e}") from e


class Datasets:
    def __init__(self, bus: Bus, api_client: k8s.ApiClient, namespace: str = "",
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.bus = bus
        self.objects = CustomObjects(api_client, GROUP, VERSION, PLURAL, KIND, namespace)
        self.core = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.clock = clock
        self._locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)
        self._removed: set[str] = set()

    def _one_at_a_time(self, key: tuple[str, str]) -> asyncio.Lock:
        """The watch, the pods and the reports all act on an object: one at a time."""
        return self._locks[key]

    # -- objects → requests -------------------------------------------------------------------

    async def handle(self, item: Synced | Changed) -> None:
        for obj in item.items if isinstance(item, Synced) else [item.obj]:
            try:
                if isinstance(item, Changed) and item.type == "DELETED":
                    await self._gone(obj)
                else:
                    async with self._one_at_a_time(dataset_key(obj)):
                        await self.reconcile(obj)
                    if isinstance(item, Synced):  # pods may have come and gone unseen
                        await self.touched(*dataset_key(obj))
            except PermanentError as e:
                # Nothing is requested before the finalizer holds the object, so skipping is
                # safe; its next event tries again. Temporary failures are retried (lanes).
                log.error("dataset not handled", dataset="/".join(dataset_key(obj)), error=str(e))

    async def reconcile(self, obj: Obj) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        held = FINALIZER in (meta.get("finalizers") or [])
        generation = int(meta.get("generation") or 1)
        if meta.get("deletionTimestamp"):
            if held:
                await self._delete(obj)
            return
        if int(status.get("observedGeneration") or 0) >= generation:
            return
        if not held:  # first the finalizer: nothing is cached that a delete could miss
            obj = await asyncio.to_thread(self.objects.hold, obj, FINALIZER)
            if obj is None:
                return
        try:
            spec = dataset_spec(obj)
        except PermanentError as e:  # only an object the CRD's schema did not check
            log.warning("dataset refused", error=str(e))
            await asyncio.to_thread(self.objects.write_status, obj,
                                    st.refused(status, generation, str(e), self.clock()))
            return
        request_id = f"cr.{meta['uid']}.{generation}"
        await self._send(cache_pb2.CacheDatasetRequest(request_id=request_id, add=spec))
        await asyncio.to_thread(self.objects.write_status, obj,
                                st.requested(status, generation, request_id, self.clock()))
        log.info("dataset requested", dataset="/".join(dataset_key(obj)), request_id=request_id)

    async def _delete(self, obj: Obj) -> None:
        """Remove a deleted Dataset from the cache once no running pod reads it."""
        namespace, name = dataset_key(obj)
        using = await asyncio.to_thread(self._readers, namespace, name)
        change = st.usage(obj.get("status") or {}, using, deleting=True, when=self.clock())
        if using:
            if change is not None:
                await asyncio.to_thread(self.objects.write_status, obj, change)
                log.info("dataset deletion deferred", dataset=f"{namespace}/{name}", pods=using)
            return
        if (obj.get("status") or {}).get("observedGeneration"):
            await self._remove(obj)
        if await asyncio.to_thread(self.objects.release, obj, FINALIZER):
            log.info("dataset removed and released", dataset=f"{namespace}/{name}")

    async def _gone(self, obj: Obj) -> None:
        """An object that disappeared without passing through :meth:`_delete` (its finalizer
        removed by hand) is removed from the cache too."""
        if (obj.get("status") or {}).get("observedGeneration") and \
                obj["metadata"].get("uid") not in self._removed:
            await self._remove(obj)

    async def _remove(self, obj: Obj) -> None:
        namespace, name = dataset_key(obj)
        uid = str(obj["metadata"].get("uid"))
        await self._send(cache_pb2.CacheDatasetRequest(
            request_id=f"cr.{uid}.delete",
            remove=cache_pb2.CacheDatasetRemove(name=name, namespace=namespace)))
        self._removed.add(uid)

    async def _send(self, request: cache_pb2.CacheDatasetRequest) -> None:
        request.requested_at.FromDatetime(self.clock())
        await self.bus.publish(subjects.cache_requests(), request, msg_id=f"cache:{request.request_id}")

    def _readers(self, namespace: str, name: str) -> list[str]:
        listed = api_json(f"list the pods of namespace {namespace}",
                          lambda: self.core.list_namespaced_pod(namespace, _preload_content=False))
        return readers((listed or {}).get("items") or [], name)

    # -- pods → InUse, deferred deletions -----------------------------------------------------

    async def touched(self, namespace: str, *names: str) -> None:
        """Pods started or stopped reading ``names``: their Datasets' InUse, and a deferred
        deletion completed once nobody reads it."""
        for name in sorted(set(names)):
            async with self._one_at_a_time((namespace, name)):
                obj = await asyncio.to_thread(self.objects.get, namespace, name)
                if obj is None or FINALIZER not in (obj["metadata"].get("finalizers") or []):
                    continue
                if obj["metadata"].get("deletionTimestamp"):
                    await self._delete(obj)
                    continue
                using = await asyncio.to_thread(self._readers, namespace, name)
                change = st.usage(obj.get("status") or {}, using, deleting=False, when=self.clock())
                if change is not None:
                    await asyncio.to_thread(self.objects.write_status, obj, change,
                                            conflict_is_temporary=True)

    # -- the hydrator's reports → status ------------------------------------------------------

    async def on_status(self, _subject: str, report: cache_pb2.CacheDatasetStatus) -> None:
        namespace = report.namespace or report.spec.namespace
        name = report.dataset or report.spec.name
        if not namespace or not name or (self.namespace and namespace != self.namespace):
            return  # a local-mode data set, or another namespace's bridge's
        async with self._one_at_a_time((namespace, name)):
            await asyncio.to_thread(self._relay, namespace, name, report)

    def _relay(self, namespace: str, name: str, report: cache_pb2.CacheDatasetStatus) -> None:
        obj = self.objects.get(namespace, name)
        if obj is None:
            return  # a pod's hostPath data set, one added otherwise, or its object is gone
        meta = obj["metadata"]
        request = report.request_id
        if request.startswith("cr.") and not request.startswith(f"cr.{meta['uid']}."):
            return  # the report of an earlier Dataset of the name
        if report.source and report.source != (obj.get("spec") or {}).get("source"):
            return  # another data set of the name (the hydrator refused this object's)
        observed = st.stamp(report.observed_at)
        created = st.parse_time(meta.get("creationTimestamp"))
        if observed and created and observed < created - CLOCK_SKEW:
            return
        status = st.from_cache_status(obj.get("status") or {}, report)
        if status is not None:
            self.objects.write_status(obj, status, conflict_is_temporary=True)
