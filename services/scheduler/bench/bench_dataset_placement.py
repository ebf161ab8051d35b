"""Cache-aware placement on the real plane: where pods land, and what it costs, term on vs off.

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/scheduler/bench/bench_dataset_placement.py --nodes 20 --gpus 4 --pods 200

Starts the test plane (etcd + kube-apiserver + kwok), a nats-server, kube-bridge and the
scheduler as separate processes (bench_e2e's setup), ``--nodes`` kwok GPU nodes with their
inventories, and ``--datasets`` data sets, each READY on one node in the ``cache_datasets``
bucket (the statuses the cache hydrator writes for a node-local tier). Then, in one run,
the same ``--pods`` pods — mixed fractional requests, each annotated
``ai.centaurus.io/dataset`` with one data set drawn at random — are created twice:

1. with the scheduler's ``dataset_locality_weight`` 0 (the term off: the profile alone);
2. with weight ``--weight`` (on), after the first batch was deleted and its cards freed.

A warm-up batch of 20 pods goes first (not reported), and one kube-bridge watches every
namespace throughout; only the scheduler is restarted between the phases.

For each: the fraction of pods bound to the node holding their data set, and the latency
from create to bound (bench_e2e's watch), at ``--rate`` pods/s (paced: the path, not a
burst's queue). The profile is cost-saving (the default), which packs pods onto the fullest
nodes and so, without the term, ignores where the data are.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_bus import wait_ready
from bench_e2e import (
    COMPUTE,
    SIZES,
    emit,
    gpu_nodes,
    publish_inventories,
    run_batch,
    service_env,
    start_bridge,
    tear_down,
)
from kubernetes import client as k8s

from alnair.v1 import allocation_pb2, cache_pb2
from alnair_common import Bus, TypedKV, subjects
from alnair_common.annotations import DATASET
from alnair_common.natsd import NatsServer, free_port
from alnair_common.testing._server_process import ServerProcess
from alnair_common.testing.kube import start_kube_plane
from alnair_common.testing.testbin import locate


def holder(i: int, nodes: list[str]) -> str:
    """The node whose tier holds data set ``i`` (spread over the cluster, not the first nodes)."""
    return nodes[(i * 7 + 3) % len(nodes)]


async def publish_datasets(url: str, namespaces: list[str], count: int, nodes: list[str]) -> None:
    bus = await Bus.connect(url, service="bench")
    kv = await TypedKV.open(bus, subjects.CACHE_DATASETS_BUCKET, cache_pb2.CacheDatasetStatus)
    for ns in namespaces:
        for i in range(count):
            name = f"ds-{i:03d}"
            await kv.put(f"{ns}.{name}", cache_pb2.CacheDatasetStatus(
                dataset=name, namespace=ns, source=f"s3://bench/{name}",
                phase=cache_pb2.CACHE_PHASE_READY, total_bytes=1 << 30, cached_bytes=1 << 30,
                progress=1.0, nodes=[holder(i, nodes)],
                spec=cache_pb2.CacheDatasetSpec(name=name, namespace=ns, source=f"s3://bench/{name}")))
    await bus.drain()


async def shares_left(url: str) -> int:
    bus = await Bus.connect(url, service="bench")
    kv = await TypedKV.open(bus, subjects.GPU_ALLOCATIONS_BUCKET, allocation_pb2.CardAllocation)
    total = 0
    for key in await kv.keys():
        entry = await kv.get(key)
        total += len(entry.value.shares) if entry is not None else 0
    await bus.drain()
    return total


async def ready(url: str) -> None:
    bus = await Bus.connect(url, service="bench")
    try:
        await wait_ready(bus)
    finally:
        await bus.drain()


def phase(api: k8s.ApiClient, namespace: str, requests: list[tuple[int, int]], reads: list[int],
          nodes: list[str], args: argparse.Namespace, nats_url: str) -> dict[str, Any]:
    annotations = [{DATASET: f"ds-{d:03d}"} for d in reads]
    result = run_batch(api, namespace, "alnair-scheduler", requests, args.timeout, nats_url,
                       args.rate, annotations=annotations)
    pods = k8s.CoreV1Api(api).list_namespaced_pod(namespace).items
    where = {p.metadata.name: p.spec.node_name for p in pods}
    local = sum(1 for i, d in enumerate(reads) if where.get(f"p{i:05d}") == holder(d, nodes))
    return {"fraction_on_data_node": round(local / len(reads), 3),
            "nodes_used": len(set(where.values()) - {None}), **result}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--memory-gib", type=int, default=80)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--datasets", type=int, default=10)
    ap.add_argument("--weight", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=20.0, help="pods created per second")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    requests = [(rng.choice(SIZES), rng.choice(COMPUTE)) for _ in range(args.pods)]
    reads = [rng.randrange(args.datasets) for _ in range(args.pods)]
    work = Path(tempfile.mkdtemp(prefix="alnair-bench-datasets-"))
    procs: list[Any] = []
    plane = start_kube_plane(locate(), work / "plane")
    try:
        api, nodes = gpu_nodes(plane, work, procs, args.nodes, args.gpus, args.memory_gib)
        nats = NatsServer(store_dir=work / "js", port=free_port())
        nats.start()
        procs.append(nats)
        kubeconfig = plane.write_kubeconfig(work / "kubeconfig")
        publish_inventories(nats.url, nodes, args.gpus, args.memory_gib)
        # One kube-bridge for every namespace, warm before the first measured pod; one
        # scheduler per phase (the weight is a setting), each on empty cards.
        procs.append(start_bridge(service_env(nats.url), kubeconfig, "", work))
        phases = {"warm-up": 0.0, "off": 0.0, "on": args.weight}
        asyncio.run(publish_datasets(nats.url, [f"bench-{p}" for p in phases], args.datasets, nodes))
        results: dict[str, Any] = {}
        for label, weight in phases.items():
            ns = f"bench-{label}"
            env = service_env(nats.url, ALNAIR_DATASET_LOCALITY_WEIGHT=str(weight),
                              ALNAIR_CONSUMER_PREFIX=f"sched-{label}")
            sched = ServerProcess("scheduler", [sys.executable, "-m", "alnair_scheduler"],
                                  work / f"scheduler-{label}.log", env=env)
            procs.append(sched)
            asyncio.run(ready(nats.url))
            count = 20 if label == "warm-up" else args.pods
            measured = phase(api, ns, requests[:count], reads[:count], nodes, args, nats.url)
            if label != "warm-up":
                results[label] = {"dataset_locality_weight": weight, **measured}
            k8s.CoreV1Api(api).delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            deadline = time.time() + 120
            while asyncio.run(shares_left(nats.url)) and time.time() < deadline:
                time.sleep(0.5)  # the next phase starts on empty cards
            sched.stop()
            procs.remove(sched)
        out = {"nodes": args.nodes, "gpus_per_node": args.gpus, "pods": args.pods,
               "datasets": args.datasets, "chance_fraction": round(1 / args.nodes, 3),
               "rate_pods_per_second": args.rate, **results, "logs": str(work)}
        emit(out, args.out)
    finally:
        tear_down(procs, plane)


if __name__ == "__main__":
    main()
