"""Benchmark: scrape latency and CPU per sample with N GPUs x M processes of replayed H200 data.

Goal (issue #8): <= 20 ms per scrape and <= 2 % of one core at a 1 s sampling period with
8 GPUs x 64 processes. Every process is its own pod (the worst case for cardinality). The
per-pod host usage reads real kernel files: each synthetic PID of the replay is a link to
this process's own /proc entry, so every pod costs the reads a real process costs (here a
process in no pod: stat, statm, io). ``--regions`` pods also have an interceptor region (read with the seqlock
protocol every period).

    .venv/bin/python services/exporter/bench/bench_exporter.py --gpus 8 --processes 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from alnair.v1 import workload_pb2
from alnair_common.cuda_region import DeviceRecord
from alnair_common.testing.cuda_region_writer import RegionWriter
from alnair_exporter import HostReader, NodeSampler, RegionScanner, StaticResolver, WorkloadDirectory, WorkloadUpdate
from alnair_exporter._exposition import MetricsServer
from alnair_exporter.collectors import COLLECTORS
from alnair_gpu import ReplaySampler, load_recording

ROOT = Path(__file__).resolve().parents[3]
RECORDING = ROOT / "tests" / "data" / "gpu" / "h200" / "share_cnn_transformer.jsonl.gz"


def _cgroup_root() -> Path:
    hybrid = Path("/sys/fs/cgroup/unified")
    return hybrid if (hybrid / "cgroup.procs").exists() else Path("/sys/fs/cgroup")


class Clock:
    """Virtual time: one sampling period per call of tick(), so host reads fall due as in production."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def build(tmp: Path, gpus: int, per_gpu: int, regions: int, host_period: float, clock: Clock) -> NodeSampler:
    gpu = ReplaySampler(load_recording(RECORDING), gpus=gpus, processes_per_gpu=per_gpu)
    directory = WorkloadDirectory()
    proc = tmp / "proc"
    proc.mkdir()
    me = Path(f"/proc/{os.getpid()}")
    table = {}
    for g in range(gpus):
        for k in range(per_gpu):
            pid = gpu.pid_of(g, k)
            uid = f"pod-{g}-{k}"
            table[pid] = uid
            (proc / str(pid)).symlink_to(me)
            event = workload_pb2.WorkloadEvent(sequence=1)
            event.workload.ref.uid, event.workload.ref.name, event.workload.ref.namespace = uid, uid, "bench"
            event.workload.phase = workload_pb2.WORKLOAD_PHASE_RUNNING
            directory.apply(WorkloadUpdate.from_proto(event), time.time())
    workspaces = tmp / "workspaces"
    for n, (pid, uid) in enumerate(list(table.items())[:regions]):
        (workspaces / uid).mkdir(parents=True)
        region = RegionWriter(workspaces / uid / "cuda.region", workload_id=uid, memory_limit_bytes=8 << 30)
        region.write_slot(0, pid=1, host_pid=pid, devices={0: DeviceRecord(memory_used_bytes=n << 20,
                                                                           kernel_launches=1000 + n)})
    return NodeSampler("bench-node", gpu=gpu, scanner=RegionScanner(workspaces, directory), directory=directory,
                       resolver=StaticResolver(table), host=HostReader(proc, _cgroup_root()), grace_seconds=60,
                       host_period_seconds=host_period, clock=clock)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def scrape_http(server: MetricsServer, count: int) -> list[float]:
    port = await server.start()
    times = []
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(count):
                t = time.perf_counter()
                response = await client.get(f"http://127.0.0.1:{port}/metrics")
                response.raise_for_status()
                times.append(time.perf_counter() - t)
    finally:
        await server.stop()
    return times


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--processes", type=int, default=64, help="processes per GPU")
    p.add_argument("--regions", type=int, default=64)
    p.add_argument("--samples", type=int, default=50)
    p.add_argument("--scrapes", type=int, default=100)
    p.add_argument("--period", type=float, default=1.0, help="sampling period, seconds")
    p.add_argument("--host-period", type=float, default=5.0, help="cgroup//proc re-read period, seconds")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        sampler = build(Path(tmp), a.gpus, a.processes, a.regions, a.host_period, clock)
        view = sampler.sample()  # warm-up
        cpu, wall = [], []
        for _ in range(a.samples):
            clock.now += a.period
            c, w = time.process_time(), time.perf_counter()
            view = sampler.sample()
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
        server = MetricsServer([collector(lambda: view) for collector in COLLECTORS], "127.0.0.1", 0)
        body = server.render()
        render, render_cpu = [], []
        for _ in range(a.scrapes):
            t, c = time.perf_counter(), time.process_time()
            server.render()
            render.append(time.perf_counter() - t)
            render_cpu.append(time.process_time() - c)
        http = asyncio.run(scrape_http(server, a.scrapes))
    result = {
        "gpus": a.gpus, "processes_per_gpu": a.processes, "pods": len(view.series), "regions": a.regions,
        "series": sum(1 for line in body.decode().splitlines() if line and not line.startswith("#")),
        "exposition_bytes": len(body),
        "sample_cpu_ms_median": 1e3 * statistics.median(cpu), "sample_cpu_ms_p95": 1e3 * pct(cpu, 0.95),
        "sample_wall_ms_median": 1e3 * statistics.median(wall),
        "sample_cpu_ms_mean": 1e3 * statistics.fmean(cpu), "period_s": a.period, "host_period_s": a.host_period,
        "core_share_pct": 100 * statistics.fmean(cpu) / a.period,
        "render_cpu_ms_median": 1e3 * statistics.median(render_cpu),
        "render_ms_median": 1e3 * statistics.median(render), "render_ms_p99": 1e3 * pct(render, 0.99),
        "http_scrape_ms_median": 1e3 * statistics.median(http), "http_scrape_ms_p99": 1e3 * pct(http, 0.99),
    }
    result["load_average_1m"] = os.getloadavg()[0]
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
