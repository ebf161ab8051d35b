"""Data sets the platform's live workloads read, from the adapters' ``workload_states`` bucket.

A pod on Kubernetes reads the tier as its namespace's read-only user and writes no lease
(``alnair_common.tier_readers``), so the hydrator learns what pods read from the platform
instead: each workload's last state (kube-bridge's WorkloadEvent, its ``ai.centaurus.io/``
annotations included) names its data sets in ``ai.centaurus.io/dataset``. A data set that a
pending, bound or running workload names is not evicted. A pod in the seed's form
(``cacheDataset: "yes"`` over hostPath volumes) names its data sets in its volumes; kube-bridge
relays them in the same annotation (one per hostPath volume, named from the path, with the
ones the pod's annotation names), so both forms are shielded alike. Only the pods kube-bridge
relays are seen: Alnair's (its scheduler, an ``alnair/*`` request, a training job's worker).
A malformed annotation names nothing here (the admission webhook reports it on the pod).
"""

from __future__ import annotations

from alnair.v1 import common_pb2, workload_pb2
from alnair_common import KVUpdate, KVWatch, subjects
from alnair_common.annotations import DATASET
from alnair_common.dataset_refs import DatasetRefError, pod_datasets

BUCKET = subjects.WORKLOAD_STATES_BUCKET
LIVE = (workload_pb2.WORKLOAD_PHASE_PENDING, workload_pb2.WORKLOAD_PHASE_BOUND,
        workload_pb2.WORKLOAD_PHASE_RUNNING)


def datasets_read(event: workload_pb2.WorkloadEvent) -> frozenset[str]:
    """The tier keys of the data sets a live workload names (none once it has ended)."""
    workload = event.workload
    raw = workload.annotations.get(DATASET)
    if workload.phase not in LIVE or raw is None:
        return frozenset()
    try:
        refs = pod_datasets({DATASET: raw})
    except DatasetRefError:
        return frozenset()
    namespace = workload.ref.namespace if workload.ref.mode == common_pb2.MODE_KUBERNETES else ""
    return frozenset(f"{namespace}.{r.name}" if namespace else r.name for r in refs)


class WorkloadReaders:
    def __init__(self) -> None:
        self._by_workload: dict[str, frozenset[str]] = {}

    def apply(self, update: KVUpdate[workload_pb2.WorkloadEvent]) -> None:
        keys = frozenset() if update.value is None else datasets_read(update.value)
        if keys:
            self._by_workload[update.key] = keys
        else:
            self._by_workload.pop(update.key, None)

    def reading(self) -> set[str]:
        """Keys of the data sets some live workload reads."""
        return set().union(*self._by_workload.values())

    async def follow(self, watch: KVWatch[workload_pb2.WorkloadEvent]) -> None:
        try:
            async for update in watch:
                self.apply(update)
        finally:
            await watch.stop()
