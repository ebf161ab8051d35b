"""Checking the plugin's allocations against the kubelet's own record (PodResources ``List``).

``Allocate`` cannot see the pod, so the plugin matches by card and amounts. Afterwards the
kubelet does know which pod holds which device IDs. This pass compares:

* units held by a pod other than the one the plugin matched → an ``identity-mismatch`` error
  event (the limits were identical — differing ones are refused at Allocate — but the
  workspace and workload ID belong to the other pod);
* an allocation the kubelet no longer lists for ``grace_seconds`` → the workload is gone even
  if its end event never reached us: its workspace is removed.

A kubelet that does not answer skips the round; nothing is removed on missing information.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from alnair_kubelet import ContainerDevices, PodResourcesClient

from ._assignments import Assignment, AssignmentIndex
from ._workspace import Workspaces

Mismatch = Callable[[Assignment, ContainerDevices], Awaitable[None]]


@dataclass
class RoundResult:
    mismatched: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


class PodResourcesReconciler:
    def __init__(self, client: PodResourcesClient, index: AssignmentIndex, workspaces: Workspaces, *,
                 grace_seconds: float, on_mismatch: Mismatch, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.index = index
        self.workspaces = workspaces
        self.grace_seconds = grace_seconds
        self.on_mismatch = on_mismatch
        self.clock = clock
        self._missing_since: dict[str, float] = {}
        self._reported: set[str] = set()

    async def run_once(self) -> RoundResult:
        """One comparison; raises KubeletError when the kubelet cannot be asked."""
        snapshot = await self.client.list()
        now = self.clock()
        result = RoundResult()
        for assignment in self.index.all():
            ids = [d for devices in assignment.allocated.values() for d in devices]
            if not ids:
                continue
            owner = next((o for o in (snapshot.owner_of(d) for d in ids) if o is not None), None)
            if owner is not None:
                self._missing_since.pop(assignment.uid, None)
                if (owner.namespace, owner.pod) != (assignment.namespace, assignment.name) \
                        and assignment.uid not in self._reported:
                    self._reported.add(assignment.uid)
                    result.mismatched.append(assignment.uid)
                    await self.on_mismatch(assignment, owner)
                continue
            since = self._missing_since.setdefault(assignment.uid, now)
            if now - since >= self.grace_seconds:
                self.index.end(assignment.uid)
                self.workspaces.remove(assignment.uid)
                self._missing_since.pop(assignment.uid, None)
                result.removed.append(assignment.uid)
        return result
