"""Which data sets exist, from the bus: a copy of the ``cache_datasets`` bucket in memory.

An admission must answer in milliseconds, so it never waits on the bus: it reads this copy,
which one watch keeps current (the hydrator's latest status per data set, keyed
``<namespace>.<name>``). A data set whose last status is REMOVED is not there. While the bus
is away the copy is what it last was; a data set created meanwhile is reported unknown, and
a pod then reads without the cache, which is correct, only slower.
"""

from __future__ import annotations

from alnair.v1 import cache_pb2
from alnair_common import KVWatch, get_logger

from ._mutation import KnownDataset

log = get_logger("alnair.admission-webhook")
PHASES = {cache_pb2.CACHE_PHASE_PENDING: "pending", cache_pb2.CACHE_PHASE_HYDRATING: "hydrating",
          cache_pb2.CACHE_PHASE_READY: "ready", cache_pb2.CACHE_PHASE_FAILED: "failed",
          cache_pb2.CACHE_PHASE_EVICTED: "evicted"}


def bucket_key(namespace: str, name: str) -> str:
    """The hydrator's key of a data set (its DatasetSpec.key)."""
    return f"{namespace}.{name}" if namespace else name


class DatasetCatalog:
    def __init__(self) -> None:
        self._known: dict[str, KnownDataset] = {}

    def lookup(self, namespace: str, name: str) -> KnownDataset | None:
        return self._known.get(bucket_key(namespace, name))

    def __len__(self) -> int:
        return len(self._known)

    def apply(self, key: str, status: cache_pb2.CacheDatasetStatus | None) -> None:
        """Take one bucket change (``status`` None: the key was deleted)."""
        if status is None or status.phase == cache_pb2.CACHE_PHASE_REMOVED:
            self._known.pop(key, None)
            return
        name = status.spec.name or status.dataset
        namespace = status.spec.namespace or status.namespace
        self._known[key] = KnownDataset(name, namespace, status.source or status.spec.source,
                                        PHASES.get(status.phase, "unknown"))

    async def follow(self, watch: KVWatch[cache_pb2.CacheDatasetStatus]) -> None:
        """Apply every change until the watch stops."""
        async for update in watch:
            self.apply(update.key, update.value)
