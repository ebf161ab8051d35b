"""Data-locality placement on the bus: the scheduler reads where data sets are hot from the
``cache_datasets`` bucket (CacheDatasetStatus records as the cache hydrator writes them) and
prefers those nodes among the cards that fit — never a card that does not fit."""

from __future__ import annotations

from sched_harness import (
    Adapter,
    Observer,
    assert_within_capacity,
    stamp,
    start_scheduler,
    stop_scheduler,
)

from alnair.v1 import cache_pb2
from alnair_common import Bus, TypedKV
from alnair_common.annotations import DATASET
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for

PHASE = cache_pb2.CachePhase


async def put_status(bus: Bus, name: str, phase: int, nodes: list[str], *,
                     namespace: str = "default", progress: float = 1.0) -> None:
    """Record a data set's status in ``cache_datasets`` under the hydrator's key."""
    total = 200 << 20
    status = cache_pb2.CacheDatasetStatus(
        dataset=name, namespace=namespace, source=f"s3://data/{name}", phase=phase,
        total_bytes=total, cached_bytes=int(total * progress), progress=progress, nodes=nodes,
        observed_at=stamp(), spec=cache_pb2.CacheDatasetSpec(
            name=name, namespace=namespace, source=f"s3://data/{name}"))
    kv = await TypedKV.open(bus, "cache_datasets", cache_pb2.CacheDatasetStatus)
    await kv.put(f"{namespace}.{name}" if namespace else name, status)


def reads(*names: str) -> dict[str, str]:
    return {DATASET: ",".join(names)}


async def test_pod_goes_where_its_data_set_is_hot_when_it_fits(nats_server: NatsServer,
                                                               bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("node-a", "node-b", "node-c"):
        await adapter.inventory(node, 1, 80)
    await put_status(bus, "imagenet", PHASE.CACHE_PHASE_READY, ["node-c"])
    await put_status(bus, "coco", PHASE.CACHE_PHASE_HYDRATING, ["node-b"], progress=0.4)
    service, task = await start_scheduler(nats_server.url)
    try:
        plain = await adapter.pending("plain", 10, 10)
        (d,) = await seen.bound(plain)
        assert d.assignment.node == "node-a"  # cost-saving, ties by name: the control
        assert "dataset" not in d.reason

        hot = await adapter.pending("reads-imagenet", 10, 10, annotations=reads("imagenet"))
        (d,) = await seen.bound(hot)
        assert d.assignment.node == "node-c"  # though cost-saving would pack onto node-a
        assert "dataset imagenet hot on node-c (100% cached)" in d.reason

        warming = await adapter.pending("reads-coco", 10, 10, annotations=reads("coco"))
        (d,) = await seen.bound(warming)
        assert d.assignment.node == "node-b"
        assert "dataset coco hydrating on node-b (40% cached)" in d.reason

        # Two data sets: the node holding more of what the pod reads wins (1 + 0 over 0 + 0.4).
        both = await adapter.pending("reads-both", 10, 10, annotations=reads("imagenet", "coco"))
        (d,) = await seen.bound(both)
        assert d.assignment.node == "node-c"
        assert "dataset imagenet hot on node-c (100% cached)" in d.reason
        assert ("dataset coco hot on node-b (40% cached), not on node-c: the profile's preference "
                "outweighed data locality there") in d.reason
        await assert_within_capacity(bus)
    finally:
        await stop_scheduler(service, task)


async def test_hot_node_that_does_not_fit_is_not_chosen(nats_server: NatsServer,
                                                        bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 1, 80)
    await adapter.inventory("node-hot", 1, 16)  # holds the data, but has 16 GiB
    await put_status(bus, "imagenet", PHASE.CACHE_PHASE_READY, ["node-hot"])
    service, task = await start_scheduler(nats_server.url, scheduling_profile="high-performance")
    try:
        big = await adapter.pending("big", 40, 50, annotations=reads("imagenet"))
        (d,) = await seen.bound(big)
        assert d.assignment.node == "node-a"
        assert ("dataset imagenet hot on node-hot (100% cached), not on node-a: no card there "
                "fits the request") in d.reason
        cards = await assert_within_capacity(bus)
        assert not cards.get("GPU-node-hot-0") or not cards["GPU-node-hot-0"].shares

        # Nothing fits anywhere: the hot node does not make room appear.
        huge = await adapter.pending("huge", 60, 50, annotations=reads("imagenet"))
        failure, code = await seen.failed(huge)
        assert code == "insufficient-memory" and huge.uid not in seen.binds
    finally:
        await stop_scheduler(service, task)


async def test_a_reader_whose_data_node_is_full_keeps_off_another_data_sets_node(
        nats_server: NatsServer, bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-hot", 1, 16)  # imagenet's node: too small for the reader
    await adapter.inventory("node-other", 1, 80)  # coco's node
    await adapter.inventory("node-z", 1, 80)  # holds nothing
    await put_status(bus, "imagenet", PHASE.CACHE_PHASE_READY, ["node-hot"])
    await put_status(bus, "coco", PHASE.CACHE_PHASE_READY, ["node-other"])
    service, task = await start_scheduler(nats_server.url)
    try:
        first = await adapter.pending("coco-reader", 10, 10, annotations=reads("coco"))
        (d,) = await seen.bound(first)
        assert d.assignment.node == "node-other"
        # Cost-saving alone would pack onto node-other, the fullest node that fits; the room
        # there is coco's readers', and node-z fits as well.
        reader = await adapter.pending("imagenet-reader", 40, 40, annotations=reads("imagenet"))
        (d,) = await seen.bound(reader)
        assert d.assignment.node == "node-z"
        assert "no card there fits the request" in d.reason
        # A workload reading nothing hot has no preference at all: packed as usual.
        plain = await adapter.pending("plain", 10, 10, annotations=reads("never-added"))
        (d,) = await seen.bound(plain)
        assert d.assignment.node == "node-z"  # the fullest node now (cost-saving)
    finally:
        await stop_scheduler(service, task)


async def test_unknown_or_unreadable_data_sets_give_no_preference(nats_server: NatsServer,
                                                                  bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("node-a", "node-b"):
        await adapter.inventory(node, 1, 80)
    # Cached, but in a cluster-wide tier: hot on no node in particular.
    await put_status(bus, "shared", PHASE.CACHE_PHASE_READY, [])
    await put_status(bus, "gone", PHASE.CACHE_PHASE_EVICTED, ["node-b"], progress=0.0)
    service, task = await start_scheduler(nats_server.url)
    try:
        unknown = await adapter.pending("unknown", 10, 10, annotations=reads("never-added"))
        shared = await adapter.pending("shared", 10, 10, annotations=reads("shared"))
        gone = await adapter.pending("gone", 10, 10, annotations=reads("gone"))
        bad = await adapter.pending("bad", 10, 10, annotations={DATASET: "Not_A_Name"})
        decisions = await seen.bound(unknown, shared, gone, bad)
        assert {d.assignment.node for d in decisions} == {"node-a"}  # the profile's choice
        assert ("dataset never-added unknown to the cache (no status in cache_datasets): no "
                "preference") in decisions[0].reason
        assert "dataset shared ready (100% cached) in a tier local to no node: no preference" \
            in decisions[1].reason
        assert "dataset gone not cached (evicted): no preference" in decisions[2].reason
        assert "data sets not read (data set name 'Not_A_Name' is not valid" in decisions[3].reason
    finally:
        await stop_scheduler(service, task)


async def test_weight_zero_turns_the_term_off_and_says_so(nats_server: NatsServer,
                                                          bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("node-a", "node-b"):
        await adapter.inventory(node, 1, 80)
    await put_status(bus, "imagenet", PHASE.CACHE_PHASE_READY, ["node-b"])
    service, task = await start_scheduler(nats_server.url, dataset_locality_weight=0.0)
    try:
        pod = await adapter.pending("pod", 10, 10, annotations=reads("imagenet"))
        (d,) = await seen.bound(pod)
        assert d.assignment.node == "node-a"
        assert "data locality is off (dataset_locality_weight 0)" in d.reason
    finally:
        await stop_scheduler(service, task)


async def test_gang_prefers_the_hot_node_and_stays_all_or_nothing(nats_server: NatsServer,
                                                                  bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    await adapter.inventory("node-a", 2, 80)
    await adapter.inventory("node-hot", 1, 80)  # room for two of the three members
    await put_status(bus, "imagenet", PHASE.CACHE_PHASE_READY, ["node-hot"])
    service, task = await start_scheduler(nats_server.url)
    try:
        await adapter.podgroup("train", 3)
        members = [await adapter.pending(f"train-{i}", 40, 40, group="train",
                                         annotations=reads("imagenet")) for i in range(3)]
        decisions = await seen.bound(*members)
        nodes = sorted(d.assignment.node for d in decisions)
        assert nodes == ["node-a", "node-hot", "node-hot"]
        for d in decisions:
            assert "dataset imagenet" in d.reason
        await seen.status("train", "Scheduled")
        await assert_within_capacity(bus)

        # A gang that cannot fit whole gets nothing, hot node or not.
        await adapter.podgroup("too-big", 3)
        more = [await adapter.pending(f"too-big-{i}", 50, 40, group="too-big",
                                      annotations=reads("imagenet")) for i in range(3)]
        await seen.failed(more[0], "gang-unschedulable")
        assert not any(p.uid in seen.binds for p in more)
    finally:
        await stop_scheduler(service, task)


async def test_restarted_scheduler_knows_where_data_sets_are_hot(nats_server: NatsServer,
                                                                 bus: Bus) -> None:
    adapter, seen = Adapter(bus), await Observer.attach(bus)
    for node in ("node-a", "node-b", "node-c"):
        await adapter.inventory(node, 1, 80)
    await put_status(bus, "imagenet", PHASE.CACHE_PHASE_READY, ["node-c"])
    service, task = await start_scheduler(nats_server.url)
    first = await adapter.pending("first", 10, 10, annotations=reads("imagenet"))
    (d,) = await seen.bound(first)
    assert d.assignment.node == "node-c"
    await stop_scheduler(service, task)

    # While it is away the data set moves (re-hydrated into another node's tier), and a pod
    # that reads it arrives: the restarted scheduler reads the bucket before placing.
    await put_status(bus, "imagenet", PHASE.CACHE_PHASE_READY, ["node-b"])
    second = await adapter.pending("second", 10, 10, annotations=reads("imagenet"))
    service, task = await start_scheduler(nats_server.url)
    try:
        (d,) = await seen.bound(second)
        assert d.assignment.node == "node-b"
        assert "dataset imagenet hot on node-b (100% cached)" in d.reason

        # A removed data set (its key deleted) is hot nowhere any more.
        kv = await TypedKV.open(bus, "cache_datasets", cache_pb2.CacheDatasetStatus)
        await kv.delete("default.imagenet")

        async def forgotten() -> bool:
            return service.engine.datasets.get("default.imagenet") is None

        await wait_for(forgotten, timeout=10, what="the removal seen by the scheduler")
        third = await adapter.pending("third", 10, 10, annotations=reads("imagenet"))
        (d,) = await seen.bound(third)
        assert "dataset imagenet unknown to the cache" in d.reason
    finally:
        await stop_scheduler(service, task)
