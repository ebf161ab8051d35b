"""End to end on the real control plane: pods → kube-bridge → bus → scheduler → Binding.

kwok plays the GPU nodes (and runs the pods once bound); the test publishes their
inventories as the device plugin would.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sched_kube_harness import gpu_pod, plane, within_capacity

from alnair_common import Bus
from alnair_common.natsd import NatsServer
from alnair_common.testing.kube import KubeNamespace


@pytest.mark.timeout(300)
async def test_200_mixed_pods_are_all_placed_with_no_card_over_capacity(
    nats_server: NatsServer, bus: Bus, kube: KubeNamespace, kwok_nodes, tmp_path: Path,
) -> None:
    rng = random.Random(7)
    async with plane(nats_server, bus, kube, tmp_path) as p:
        await p.gpu_nodes(kwok_nodes, 20, 4, 80)  # 80 cards, 6400 GiB
        pods = [gpu_pod(f"mixed-{i}", rng.choice([1, 2, 4, 8, 10, 16, 20, 24, 40]),
                        rng.choice([5, 10, 20, 25, 30, 50]),
                        profile=rng.choice([None, "cost-saving", "high-performance"]))
                for i in range(200)]
        await p.create(*pods)
        assignments = await p.bound([q["metadata"]["name"] for q in pods], timeout=240)
        per_card = within_capacity(assignments, 80)
        assert sum(m for m, _ in per_card.values()) == sum(
            int(q["spec"]["containers"][0]["resources"]["limits"]["alnair/vgpu-memory"]) for q in pods)


@pytest.mark.timeout(180)
async def test_cost_saving_packs_high_performance_spreads_and_a_finished_share_is_reused(
    nats_server: NatsServer, bus: Bus, kube: KubeNamespace, kwok_nodes, tmp_path: Path,
) -> None:
    async with plane(nats_server, bus, kube, tmp_path) as p:
        nodes = await p.gpu_nodes(kwok_nodes, 2, 2, 80)
        packed = [gpu_pod(f"pack-{i}", 10, 10) for i in range(4)]
        await p.create(*packed)
        a = await p.bound([q["metadata"]["name"] for q in packed])
        assert len({x["gpuUuid"] for x in a.values()}) == 1, a
        spread = [gpu_pod(f"spread-{i}", 10, 10, profile="high-performance") for i in range(3)]
        await p.create(*spread)
        s = await p.bound([q["metadata"]["name"] for q in spread])
        packed_card = next(iter(a.values()))["gpuUuid"]
        assert len({x["gpuUuid"] for x in s.values()} | {packed_card}) == 4, s
        assert {x["node"] for x in s.values()} == set(nodes)

        # No card has 75 GiB left; a new node brings one, taken by "big".
        (extra,) = await p.gpu_nodes(kwok_nodes, 1, 1, 80)
        await p.create(gpu_pod("big", 75, 50))
        (placed,) = (await p.bound(["big"])).values()
        assert placed["node"] == extra
        await p.create(gpu_pod("waiting", 75, 50))
        msg = await p.failed_scheduling("waiting", "no card with 75 GiB and 50 % free")
        assert "[insufficient-memory]" in msg
        await p.kube_finish("big", kwok_nodes)
        (reused,) = (await p.bound(["waiting"], timeout=60)).values()
        assert reused["gpuUuid"] == placed["gpuUuid"]


@pytest.mark.timeout(240)
async def test_gang_of_8_on_room_for_6_then_capacity_appears_and_competing_gangs_finish(
    nats_server: NatsServer, bus: Bus, kube: KubeNamespace, kwok_nodes, tmp_path: Path,
) -> None:
    async with plane(nats_server, bus, kube, tmp_path) as p:
        await p.gpu_nodes(kwok_nodes, 3, 2, 80)  # 6 cards; one 50 GiB member per card
        await p.podgroup("train", 8)
        members = [gpu_pod(f"train-{i}", 50, 60, group="train") for i in range(8)]
        await p.create(*members)
        msg = await p.failed_scheduling("train-0", "only 6 of the 8 members fit at once")
        assert msg.startswith("[gang-unschedulable] PodGroup")

        async def group_pending() -> dict | None:
            status = await p.podgroup_status("train")
            return status if status.get("phase") == "Pending" and status.get("message") else None

        from alnair_common.testing import wait_for

        status = await wait_for(group_pending, timeout=30, what="PodGroup train Pending with a reason")
        assert status["scheduled"] == 0 and "only 6 of the 8" in status["message"]
        assert not any(pod.spec.node_name for pod in (await p.pods()).values())
        await p.gpu_nodes(kwok_nodes, 1, 2, 80)
        names = [m["metadata"]["name"] for m in members]
        a = await p.bound(names, timeout=60)
        assert len({x["gpuUuid"] for x in a.values()}) == 8

        async def group_scheduled() -> dict | None:
            status = await p.podgroup_status("train")
            return status if status.get("phase") == "Scheduled" else None

        status = await wait_for(group_scheduled, timeout=30, what="PodGroup train Scheduled")
        assert status["scheduled"] == 8

        # Two gangs of 5 whole cards compete for the 8 cards once train ends: one must win
        # whole, the other must hold nothing, and it follows when the winner finishes.
        await p.podgroup("a", 5)
        await p.podgroup("b", 5)
        interleaved = []
        for i in range(5):
            interleaved += [gpu_pod(f"a-{i}", 60, 50, group="a"), gpu_pod(f"b-{i}", 60, 50, group="b")]
        await p.create(*interleaved)
        for n in names:
            await p.kube_finish(n, kwok_nodes)
        groups = {g: [f"{g}-{i}" for i in range(5)] for g in ("a", "b")}

        async def one_group_bound() -> str | None:
            pods = await p.pods()
            for g, ms in groups.items():
                if all(pods[m].spec.node_name for m in ms):
                    return g
            return None

        winner = await wait_for(one_group_bound, timeout=90, interval=0.2, what="one gang bound whole")
        loser = "b" if winner == "a" else "a"
        pods = await p.pods()
        assert not any(pods[m].spec.node_name for m in groups[loser]), "partial gang placement"
        for m in groups[winner]:
            await p.kube_finish(m, kwok_nodes)
        await p.bound(groups[loser], timeout=90)
