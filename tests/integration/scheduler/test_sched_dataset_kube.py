"""Data-locality placement on the real control plane: a pod annotated
``ai.centaurus.io/dataset`` goes through kube-bridge to the scheduler and is bound to the kwok
node where its data set is hot."""

from __future__ import annotations

from pathlib import Path

import pytest
from sched_kube_harness import gpu_pod, plane
from test_sched_dataset_placement import put_status

from alnair.v1 import cache_pb2
from alnair_common import Bus
from alnair_common.annotations import DATASET
from alnair_common.natsd import NatsServer
from alnair_common.testing.kube import KubeNamespace


@pytest.mark.timeout(180)
async def test_annotated_pod_is_bound_to_the_node_holding_its_data_set(
    nats_server: NatsServer, bus: Bus, kube: KubeNamespace, kwok_nodes, tmp_path: Path,
) -> None:
    async with plane(nats_server, bus, kube, tmp_path) as p:
        nodes = sorted(await p.gpu_nodes(kwok_nodes, 3, 1, 80))
        hot = nodes[-1]  # the last by name: cost-saving alone would never start there
        await put_status(bus, "imagenet", cache_pb2.CACHE_PHASE_READY, [hot],
                         namespace=kube.namespace)
        plain = gpu_pod("plain", 10, 10)
        reader = gpu_pod("reader", 10, 10)
        reader["metadata"]["annotations"][DATASET] = "imagenet"
        await p.create(plain)
        await p.bound(["plain"])
        await p.create(reader)
        placed = await p.bound(["plain", "reader"])
        assert placed["plain"]["node"] == nodes[0]
        assert placed["reader"]["node"] == hot
