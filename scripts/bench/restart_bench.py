"""The scheduler's time to ready after a restart, against how many workloads ever ran.

For each history size a fresh loopback nats-server gets that many finished workloads (their
four lifecycle events on the WORKLOADS stream and their record in ``workload_states``, as an
adapter publishes them) plus a few live ones, then a real ``alnair-scheduler`` process is
started and timed from its start to ``/readyz`` answering 200 (the scheduler is ready once it
has read what it needs to place: the ``replay`` health check). Sizes run in the same
invocation so their ratio is meaningful on a noisy machine.

History is written in seconds here, while on a real platform it accumulates over days: the
scheduler re-reads the streams only ``replay_overlap_seconds`` back (300 s by default), so
the bench sets that to ``--overlap`` seconds and waits that long after writing, to stand for
a history older than the overlap. ``--keep`` applies the local agent's retention (at most
that many finished workloads are kept) before the restart, as the agent does every minute.

    .venv/bin/python scripts/bench/restart_bench.py [--sizes 10,10000] [--rounds 3] [--overlap 2] [--keep 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, ensure_streams
from alnair_common.natsd import NatsServer, free_port
from alnair_lifecycle import LifecyclePublisher, Retention
from alnair_local_agent._retention import forget_expired

P = wl.WorkloadPhase
PHASES = (P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING,
          P.WORKLOAD_PHASE_SUCCEEDED)


def workload(i: int, phase: int) -> wl.Workload:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid=f"past-{i:06d}", name=f"past-{i}",
                                               namespace="local", mode=common_pb2.MODE_LOCAL),
                    request=common_pb2.GpuRequest(memory_gib=1, compute_percent=10),
                    scheduler_name="alnair-scheduler", phase=phase)
    if phase >= P.WORKLOAD_PHASE_BOUND:
        w.node = "bench-node"
        w.assignment.CopyFrom(common_pb2.GpuAssignment(node="bench-node", gpu_uuid="GPU-bench-0",
                                                       memory_gib=1, compute_percent=10))
    return w


async def fill(bus: Bus, count: int, keep: int | None) -> None:
    lifecycle = await LifecyclePublisher.open(bus, "local-agent@bench")

    async def one(i: int) -> None:
        for phase in PHASES:
            await lifecycle.publish(workload(i, phase))

    for start in range(0, count, 200):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 200))))
    if keep is not None:
        with tempfile.TemporaryDirectory() as workloads:
            await forget_expired(lifecycle, Path(workloads), "bench-node",
                                 Retention(retention_seconds=7 * 86400, keep=keep))


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def time_to_ready(url: str, data_dir: Path, overlap: float) -> float:
    health = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env.update({"ALNAIR_NATS_URL": url, "ALNAIR_HEALTH_PORT": str(health),
                "ALNAIR_DATA_DIR": str(data_dir), "ALNAIR_LOG_LEVEL": "warning",
                "ALNAIR_REPLAY_OVERLAP_SECONDS": str(overlap)})
    started = time.monotonic()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "alnair-scheduler")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not ready(health):
            if proc.poll() is not None:
                raise RuntimeError(f"the scheduler exited with {proc.returncode}")
            if time.monotonic() - started > 300:
                raise RuntimeError("the scheduler was not ready within 300 s")
            time.sleep(0.02)
        return time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(30)


async def measure(size: int, rounds: int, overlap: float, keep: int | None) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", port=free_port())
        server.start()
        try:
            bus = await Bus.connect(server.url, service="bench")
            await ensure_streams(bus)
            filled = time.monotonic()
            await fill(bus, size, keep)
            print(f"  {size} past workloads written in {time.monotonic() - filled:.1f} s", flush=True)
            await bus.drain()
            await asyncio.sleep(overlap + 1)  # the history is now older than the overlap
            return [await asyncio.to_thread(time_to_ready, server.url, Path(tmp) / "data", overlap)
                    for _ in range(rounds)]
        finally:
            server.stop()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,10000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--overlap", type=float, default=2.0)
    ap.add_argument("--keep", type=int, default=None)
    args = ap.parse_args()
    results = {}
    for size in [int(s) for s in args.sizes.split(",")]:
        times = await measure(size, args.rounds, args.overlap, args.keep)
        results[size] = times
        print(f"history {size:>6}: time to ready median {statistics.median(times):.2f} s "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)})", flush=True)
    sizes = sorted(results)
    if len(sizes) > 1:
        small, big = statistics.median(results[sizes[0]]), statistics.median(results[sizes[-1]])
        print(f"ratio {sizes[-1]} / {sizes[0]} past workloads: {big / small:.2f}×")


if __name__ == "__main__":
    asyncio.run(main())
