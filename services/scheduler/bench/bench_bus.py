"""Benchmark the scheduler alone at the bus level, and the gang stress.

    .venv/bin/python services/scheduler/bench/bench_bus.py placement --nodes 1000 --gpus 8 --pods 10000
    .venv/bin/python services/scheduler/bench/bench_bus.py gangs --gangs 1000 --gpus 16

``placement``: a real nats-server and the scheduler in its own process; ``--pods`` pending
WorkloadEvents are published as fast as JetStream acknowledges them, and the time from each
publish to its BindDecision is measured (no Kubernetes in the path: this is the scheduler's
own share of the end-to-end latency).

``gangs``: ``--gangs`` PodGroups of 1..16 members (whole cards: each member asks for a full
card) arrive at once on a cluster of ``--gpus`` cards; an adapter loop binds each decision
and finishes the member after ``--hold`` seconds. It reports how many groups completed and
how many were stuck (no progress for ``--stall`` seconds) — the goal is zero.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import allocation_pb2, commands_pb2, common_pb2, inventory_pb2, scheduling_pb2, workload_pb2
from alnair_common import Bus, TypedKV, ensure_streams, subjects
from alnair_common.natsd import NatsServer, free_port
from alnair_common.testing._server_process import ServerProcess

GIB = 1024**3
SIZES = [1, 2, 4, 8, 10, 16, 20, 24, 40]
COMPUTE = [5, 10, 20, 25, 30, 50]


def now_ts() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


def event(uid: str, phase: int, memory: int, compute: int, seq: int,
          group: str | None = None) -> workload_pb2.WorkloadEvent:
    w = workload_pb2.Workload(
        ref=common_pb2.WorkloadRef(uid=uid, name=uid, namespace="bench", mode=common_pb2.MODE_KUBERNETES),
        request=common_pb2.GpuRequest(memory_gib=memory, compute_percent=compute),
        scheduler_name="alnair-scheduler", phase=phase, created_at=now_ts(),
        labels={"alnair.centaurus.io/pod-group": group} if group else {})
    return workload_pb2.WorkloadEvent(workload=w, observed_at=now_ts(), sequence=seq, source="kube-bridge")


async def inventories(bus: Bus, nodes: int, gpus: int, memory_gib: int) -> None:
    for n in range(nodes):
        node = f"gpu-{n:04d}"
        await bus.publish(subjects.node_inventory(node), inventory_pb2.NodeInventory(
            node=node, observed_at=now_ts(), gpus=[inventory_pb2.Gpu(
                uuid=f"GPU-{node}-{i}", index=i, memory_bytes=memory_gib * GIB,
                health=inventory_pb2.GPU_HEALTH_HEALTHY, vgpu_memory_gib=memory_gib,
                vgpu_compute_percent=100) for i in range(gpus)]))


def start_scheduler(nats: NatsServer, work: Path, **env: str) -> ServerProcess:
    return ServerProcess("scheduler", [sys.executable, "-m", "alnair_scheduler"],
                         work / "scheduler.log",
                         env={**os.environ, "ALNAIR_NATS_URL": nats.url, "ALNAIR_LOG_LEVEL": "warning",
                              "ALNAIR_LOG_FORMAT": "json", "ALNAIR_NODE_NAME": "bench", **env})


async def wait_ready(bus: Bus) -> None:
    from alnair.v1 import platform_pb2

    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            report = await bus.request(subjects.health("scheduler"), platform_pb2.StatusRequest(),
                                       platform_pb2.HealthReport, timeout=1)
            if report.ready:
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        await asyncio.sleep(0.2)
    raise TimeoutError("scheduler not ready within 60 s")


async def placement(args: argparse.Namespace, nats: NatsServer, work: Path) -> dict:
    bus = await Bus.connect(nats.url, service="bench")
    await ensure_streams(bus)
    await inventories(bus, args.nodes, args.gpus, 80)
    sched = start_scheduler(nats, work)
    try:
        await wait_ready(bus)
        decided: dict[str, float] = {}
        done = asyncio.Event()

        async def on_bind(_: str, d: scheduling_pb2.BindDecision) -> None:
            decided.setdefault(d.workload.uid, time.time())
            if len(decided) >= args.pods:
                done.set()

        await bus.subscribe(subjects.sched_bind(), scheduling_pb2.BindDecision, on_bind)
        rng = random.Random(args.seed)
        sent: dict[str, float] = {}
        start = time.time()
        for i in range(args.pods):
            uid = f"p{i:06d}"
            if args.rate:  # paced arrivals: latency without a queue built by the burst
                await asyncio.sleep(max(0.0, start + i / args.rate - time.time()))
            sent[uid] = time.time()
            await bus.publish(subjects.workload_events(), event(
                uid, workload_pb2.WORKLOAD_PHASE_PENDING, rng.choice(SIZES), rng.choice(COMPUTE), 1))
        published = time.time()
        try:
            await asyncio.wait_for(done.wait(), args.timeout)
        except TimeoutError:
            pass
        lat = sorted(decided[u] - sent[u] for u in decided)
        q = statistics.quantiles(lat, n=100)
        end = max(decided.values())
        return {"mode": "placement (bus only)", "nodes": args.nodes, "gpus_per_node": args.gpus,
                "pods": args.pods, "arrival_rate_per_second": args.rate or "burst",
                "decided": len(decided),
                "publish_seconds": round(published - start, 2),
                "throughput_pods_per_second": round(len(decided) / (end - start), 1),
                "latency_p50_ms": round(q[49] * 1000, 1), "latency_p99_ms": round(q[98] * 1000, 1)}
    finally:
        sched.stop()
        await bus.drain()


async def gangs(args: argparse.Namespace, nats: NatsServer, work: Path) -> dict:
    bus = await Bus.connect(nats.url, service="bench")
    await ensure_streams(bus)
    await inventories(bus, 1, args.gpus, 80)
    sched = start_scheduler(nats, work, ALNAIR_TICK_SECONDS="0.5")
    rng = random.Random(args.seed)
    sizes = {f"g{i:04d}": rng.randint(1, 16) for i in range(args.gangs)}
    members = {f"{g}-{m}": g for g, n in sizes.items() for m in range(n)}
    bound_members: dict[str, int] = {g: 0 for g in sizes}
    completed: dict[str, float] = {}
    last_progress = [time.time()]
    seq = [10]
    finished = [0]
    try:
        await wait_ready(bus)
        queue: asyncio.Queue[str] = asyncio.Queue()
        all_done = asyncio.Event()

        async def on_bind(_: str, d: scheduling_pb2.BindDecision) -> None:
            queue.put_nowait(d.workload.uid)

        await bus.subscribe(subjects.sched_bind(), scheduling_pb2.BindDecision, on_bind)

        async def adapter() -> None:
            while True:
                uid = await queue.get()
                g = members[uid]
                last_progress[0] = time.time()
                bound_members[g] += 1
                if bound_members[g] == sizes[g]:
                    completed[g] = time.time()
                    if len(completed) == len(sizes):
                        all_done.set()
                await asyncio.sleep(args.hold)
                seq[0] += 1
                await bus.publish(subjects.workload_events(), event(
                    uid, workload_pb2.WORKLOAD_PHASE_SUCCEEDED, 80, 100, seq[0], g))
                finished[0] += 1

        workers = [asyncio.create_task(adapter()) for _ in range(args.gpus)]
        start = time.time()
        for g, n in sizes.items():
            await bus.publish(subjects.podgroup_events(), commands_pb2.PodGroup(
                ref=commands_pb2.ObjectRef(namespace="bench", name=g, uid=g), min_member=n,
                created_at=now_ts()))
        order = list(members)
        rng.shuffle(order)
        for uid in order:
            await bus.publish(subjects.workload_events(), event(
                uid, workload_pb2.WORKLOAD_PHASE_PENDING, 80, 100, 1, members[uid]))
        while len(completed) < len(sizes) and time.time() - last_progress[0] < args.stall:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_done.wait(), 0.5)
        end = time.time()
        partial = [g for g in sizes if 0 < bound_members[g] < sizes[g]]
        # Once every bound member has finished, nothing may stay committed.
        kv = await TypedKV.open(bus, subjects.GPU_ALLOCATIONS_BUCKET, allocation_pb2.CardAllocation)
        deadline = time.time() + 15
        left = -1
        while time.time() < deadline:
            left = 0
            for key in await kv.keys():
                entry = await kv.get(key)
                left += len(entry.value.shares) if entry else 0
            if left == 0 and finished[0] == sum(bound_members.values()):
                break
            await asyncio.sleep(0.2)
        for w in workers:
            w.cancel()
        return {"mode": "gang stress (bus only)", "gpus": args.gpus, "gangs": args.gangs,
                "members": len(members), "completed_gangs": len(completed),
                "stuck_gangs": len(sizes) - len(completed), "partially_bound_gangs": len(partial),
                "shares_left_committed": left, "seconds": round(end - start, 1),
                "hold_seconds": args.hold}
    finally:
        sched.stop()
        await bus.drain()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["placement", "gangs"])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--gangs", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=0.0, help="pods/s to publish (0: as fast as acked)")
    ap.add_argument("--hold", type=float, default=0.05)
    ap.add_argument("--stall", type=float, default=60)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="alnair-bench-bus-"))
    nats = NatsServer(store_dir=work / "js", port=free_port())
    nats.start()
    try:
        run = placement if args.mode == "placement" else gangs
        result = asyncio.run(run(args, nats, work))
    finally:
        nats.stop()
    result["cpus"] = os.cpu_count()
    result["logs"] = str(work)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
