"""What the kubelet allocated to each pod: Alnair's vGPU units per card, from PodResources.

The device plugin's unit IDs name their card (``<GPU UUID>-m<k>`` for one GiB of
``alnair/vgpu-memory``, ``<GPU UUID>-c<k>`` for one percent of ``alnair/vgpu-compute``), so
the kubelet's PodResources ``List`` tells, for every pod on the node, how much of which GPU it
holds — also for pods whose processes NVML cannot show and pods without the interceptor.
The exporter exposes those shares next to the measured usage, and uses them to name the card
behind CUDA ordinal 0 of a pod that holds exactly one.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from alnair_kubelet import PodResourcesSnapshot

MEMORY_RESOURCE = "alnair/vgpu-memory"
COMPUTE_RESOURCE = "alnair/vgpu-compute"
_UNIT = re.compile(r"^(?P<uuid>.+)-(?P<kind>[mc])(?P<index>\d+)$")
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class PodShare:
    """One pod's allocation on one GPU."""

    namespace: str
    pod: str
    gpu_uuid: str
    memory_bytes: int
    compute_ratio: float


@dataclass(frozen=True)
class PodAllocations:
    shares: tuple[PodShare, ...] = ()
    ignored_ids: int = 0  # device IDs of Alnair's resources that name no card (logged by the caller)

    @classmethod
    def from_snapshot(cls, snapshot: PodResourcesSnapshot) -> PodAllocations:
        units: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
        ignored = 0
        for entry in snapshot.entries:
            if entry.resource not in (MEMORY_RESOURCE, COMPUTE_RESOURCE):
                continue
            for device_id in entry.device_ids:
                m = _UNIT.match(device_id)
                kind = "m" if entry.resource == MEMORY_RESOURCE else "c"
                if m is None or m["kind"] != kind:
                    ignored += 1
                    continue
                units[(entry.namespace, entry.pod, m["uuid"])][0 if kind == "m" else 1] += 1
        shares = tuple(PodShare(ns, pod, uuid, memory * GIB, compute / 100.0)
                       for (ns, pod, uuid), (memory, compute) in sorted(units.items()))
        return cls(shares, ignored)

    def cards_of(self, namespace: str, pod: str) -> list[str]:
        return sorted({s.gpu_uuid for s in self.shares if s.namespace == namespace and s.pod == pod})
