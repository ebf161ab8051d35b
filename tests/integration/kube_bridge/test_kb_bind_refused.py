"""Bindings the API refuses: kube-bridge binds with one call and reads the pod only then.

A pod bound elsewhere or recreated under the same name gets a not-ok answer with the reason
(retrying cannot help); the annotations travel with the Binding, so a pod is never bound
without them.
"""

from __future__ import annotations

import asyncio
import json

from kb_support import alnair_pod, stream_messages
from test_kb_lifecycle import decision

from alnair.v1 import scheduling_pb2
from alnair_common import Bus, subjects
from alnair_common.annotations import GPU_ASSIGNMENT
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import publish_decision
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes


async def results_for(bus: Bus, name: str) -> list[scheduling_pb2.BindResult]:
    return [r for r in await stream_messages(bus, "SCHEDULING", subjects.sched_bound(),
                                             scheduling_pb2.BindResult)
            if r.workload.name == name]


async def test_bound_elsewhere_and_recreated_pods_are_refused_for_good(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    await start_bridge()
    here, there = kwok_nodes(2)

    taken = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("taken"))
    kwok_nodes.bind(kube.namespace, "taken", there)
    await publish_decision(bus, decision(taken, here))
    [result] = await wait_for(lambda: results_for(bus, "taken"), timeout=20,
                              what="answer for the pod bound elsewhere")
    assert not result.ok and f"already bound to {there}" in result.reason

    old = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("again"))
    kube.core.delete_namespaced_pod("again", kube.namespace, grace_period_seconds=0)

    def gone() -> bool:
        return not [p for p in kube.core.list_namespaced_pod(kube.namespace).items
                    if p.metadata.name == "again"]

    await wait_for(lambda: asyncio.to_thread(gone), timeout=20, what="old pod gone")
    new = kube.core.create_namespaced_pod(kube.namespace, alnair_pod("again"))
    await publish_decision(bus, decision(old, here))
    [result] = await wait_for(lambda: results_for(bus, "again"), timeout=20,
                              what="answer for the recreated pod")
    assert not result.ok and "recreated" in result.reason
    current = kube.core.read_namespaced_pod("again", kube.namespace)
    assert current.metadata.uid == new.metadata.uid and not current.spec.node_name
    assert GPU_ASSIGNMENT not in (current.metadata.annotations or {})

    # The decision for the new pod binds it, annotations in the same write.
    await publish_decision(bus, decision(new, here, gpu="GPU-new"))

    async def ok() -> bool:
        return any(r.ok for r in await results_for(bus, "again"))

    await wait_for(ok, timeout=20, what="new pod bound")
    bound = kube.core.read_namespaced_pod("again", kube.namespace)
    assert bound.spec.node_name == here
    assert json.loads(bound.metadata.annotations[GPU_ASSIGNMENT])["gpuUuid"] == "GPU-new"
