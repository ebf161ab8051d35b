"""Benchmark: create→bound through the whole path, Alnair vs kube-scheduler, same plane.

    .venv/bin/python services/scheduler/bench/bench_e2e.py --nodes 100 --gpus 8 --pods 1000

Starts the test plane (etcd + kube-apiserver + kwok from ``scripts/testbin``), a nats-server,
kube-bridge and the scheduler as separate processes (as deployed), creates ``--nodes`` kwok
GPU nodes and publishes their inventories as the device plugin would. Then, in one run:

1. ``--pods`` pods with ``schedulerName: alnair-scheduler`` and mixed fractional requests,
   path apiserver → kube-bridge → bus → scheduler → bus → kube-bridge → Binding;
2. the same pods with the default scheduler (``$ALNAIR_TESTBIN/kube-scheduler``) placing
   them by the extended resources ``alnair/vgpu-memory`` / ``alnair/vgpu-compute``.

Latency of a pod, the same for both schedulers (same creating threads, same watch code):
from just before its create call to the moment a watch of the namespace sees it with a
``nodeName``. With ``--rate 0`` (the default) all pods are created as fast as 8 threads can,
so a pod's latency includes the time it queues behind the pods created before it: p99 then
says how long the whole burst took to drain, not how long one pod's path takes. ``--rate``
paces arrivals below capacity to measure the path itself. Throughput: pods bound divided
by the time from the first create call to the last bound pod. kube-scheduler runs with its
defaults unless ``--kube-api-qps`` is given: its client is then limited to 50 requests/s
(bursts of 100), which caps it near 55 binds/s here; Alnair's clients have no such limit.
For Alnair, ``steps`` splits each pod's path by the storage times of its messages in
JetStream (pending event, bind decision, bind result). Prints one JSON document (and
writes it to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from alnair.v1 import inventory_pb2
from alnair_common import subjects
from alnair_common.natsd import NatsServer, free_port
from alnair_common.testing._server_process import ServerProcess
from alnair_common.testing.kube import project_crd_files, start_kube_plane
from alnair_common.testing.kwok import gpu_node_manifest, start_kwok
from alnair_common.testing.testbin import locate

REPO = Path(__file__).resolve().parents[3]
TICKS = os.sysconf("SC_CLK_TCK")
GIB = 1024**3
SIZES = [1, 2, 4, 8, 10, 16, 20, 24, 40]
COMPUTE = [5, 10, 20, 25, 30, 50]


def pod(name: str, scheduler: str, memory: int, compute: int,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"alnair/vgpu-memory": str(memory), "alnair/vgpu-compute": str(compute)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"schedulerName": scheduler,
                     # kwok nodes start tainted not-ready; both schedulers get the same pods.
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": limits, "requests": limits}}]}}


class BoundWatch:
    """Records when each pod of a namespace is first seen with a nodeName.

    Reads the watch stream as raw JSON (no client models): the load generator shares the
    2 cores with both schedulers and should take as little of them as it can."""

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self.core = k8s.CoreV1Api(api)
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rv = self.core.list_namespaced_pod(self.namespace).metadata.resource_version
        while not self._stop.is_set():
            try:
                response = self.core.list_namespaced_pod(
                    self.namespace, watch=True, resource_version=rv, timeout_seconds=5,
                    allow_watch_bookmarks=True, _preload_content=False)
                for line in response:
                    for part in line.splitlines():
                        if not part.strip():
                            continue
                        obj = json.loads(part)["object"]
                        rv = obj["metadata"].get("resourceVersion", rv)
                        name = obj["metadata"].get("name")
                        if (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
                            self.bound[name] = time.time()
                response.release_conn()
            except Exception as e:  # noqa: BLE001 - a benchmark watch resumes
                print(f"watch {self.namespace}: {e!r}", file=sys.stderr)
                rv = self.core.list_namespaced_pod(self.namespace).metadata.resource_version

    def stop(self) -> None:
        self._stop.set()


def process_cpu() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process and every descendant, by name.

    On a 2-core machine every process of the plane competes with the two schedulers, so
    where the CPU went says more than wall time alone."""
    parent: dict[int, int] = {}
    info: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        pid = int(entry)
        parent[pid] = int(fields[1])
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        for arg in cmdline:
            if arg.startswith(b"alnair_"):
                name = arg.decode()
        info[pid] = (name, (int(fields[11]) + int(fields[12])) / TICKS)
    me = os.getpid()
    out: dict[str, float] = {}
    for pid, (name, cpu) in info.items():
        p = pid
        while p not in (0, 1, me):
            p = parent.get(p, 0)
        if p == me or pid == me:
            key = "bench (load + watch)" if pid == me else name
            out[key] = out.get(key, 0.0) + cpu
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 1) for k, v in sorted(after.items())
            if v - before.get(k, 0.0) >= 0.05}


def quantiles_ms(values: list[float]) -> dict[str, float | None]:
    if len(values) < 2:
        return {"p50_ms": None, "p99_ms": None}
    q = statistics.quantiles(values, n=100)
    return {"p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1)}


async def stream_times(url: str, namespace: str) -> dict[str, dict[str, float]]:
    """When JetStream stored each pod's pending event, bind decision and bind result."""
    import nats

    from alnair.v1 import scheduling_pb2, workload_pb2

    nc = await nats.connect(url)
    js = nc.jetstream()
    out: dict[str, dict[str, float]] = {"pending": {}, "decision": {}, "result": {}}
    wanted = [(subjects.workload_events(), workload_pb2.WorkloadEvent, "pending"),
              (subjects.sched_bind(), scheduling_pb2.BindDecision, "decision"),
              (subjects.sched_bound(), scheduling_pb2.BindResult, "result")]
    for subject, message_type, stage in wanted:
        sub = await js.subscribe(subject, ordered_consumer=True)
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except (TimeoutError, nats.errors.TimeoutError):
                break
            m = message_type()
            m.ParseFromString(msg.data)
            ref = m.workload.ref if stage == "pending" else m.workload
            if ref.namespace != namespace:
                continue
            if stage == "pending" and m.workload.phase != workload_pb2.WORKLOAD_PHASE_PENDING:
                continue
            out[stage].setdefault(ref.name, msg.metadata.timestamp.timestamp())
        await sub.unsubscribe()
    await nc.close()
    return out


def stages(times: dict[str, dict[str, float]], sent: dict[str, float],
           bound: dict[str, float]) -> dict[str, dict[str, float | None]]:
    """Per-pod time of each step of Alnair's path, from the stream's storage timestamps."""
    steps = [("create_to_pending_on_bus", sent, times["pending"]),
             ("pending_to_decision", times["pending"], times["decision"]),
             ("decision_to_bind_result", times["decision"], times["result"]),
             ("bind_result_to_watch_bound", times["result"], bound)]
    return {name: quantiles_ms([b[n] - a[n] for n in a if n in b]) for name, a, b in steps}


def run_batch(api: k8s.ApiClient, namespace: str, scheduler: str, requests: list[tuple[int, int]],
              timeout: float, nats_url: str = "", rate: float = 0.0,
              trace: Path | None = None,
              annotations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    bound = BoundWatch(api, namespace)
    time.sleep(0.5)
    sent: dict[str, float] = {}

    def create(i: int) -> None:
        name = f"p{i:05d}"
        if rate:
            time.sleep(max(0.0, start + i / rate - time.time()))
        sent[name] = time.time()
        manifest = pod(name, scheduler, *requests[i], annotations[i] if annotations else None)
        response = core.create_namespaced_pod(namespace, manifest, _preload_content=False)
        response.drain_conn()  # read to the end, or the pooled connection is spoilt
        response.release_conn()

    cpu_before = process_cpu()
    start = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(len(requests))))
    created = time.time()
    deadline = time.time() + timeout
    while len(bound.bound) < len(requests) and time.time() < deadline:
        time.sleep(0.2)
    bound.stop()
    cpu = cpu_delta(cpu_before, process_cpu())
    lat = sorted(bound.bound[n] - sent[n] for n in bound.bound if n in sent)
    end = max(bound.bound.values()) if bound.bound else time.time()
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [float("nan")] * 99
    extra = {}
    times: dict[str, dict[str, float]] = {}
    if nats_url:
        import asyncio
        times = asyncio.run(stream_times(nats_url, namespace))
        extra["steps"] = stages(times, sent, bound.bound)
    if trace is not None:  # per pod, seconds after the first create call
        rows = {n: {"sent": t - start, "bound": bound.bound.get(n, float("nan")) - start,
                    **{k: v[n] - start for k, v in times.items() if n in v}}
                for n, t in sorted(sent.items())}
        trace.write_text(json.dumps(rows) + "\n")
    return {"scheduler": scheduler, "pods": len(requests), "bound": len(bound.bound),
            "arrivals": f"paced {rate:g} pods/s" if rate else "burst (8 creating threads)",
            "create_seconds": round(created - start, 2),
            "create_to_last_bound_seconds": round(end - start, 2),
            "throughput_pods_per_second": round(len(bound.bound) / max(end - start, 1e-9), 1),
            "latency_p50_ms": round(q[49] * 1000, 1), "latency_p99_ms": round(q[98] * 1000, 1),
            "latency_max_ms": round(lat[-1] * 1000, 1) if lat else None,
            "cpu_seconds": cpu, **extra}


def gpu_nodes(plane: Any, work: Path, procs: list[Any], nodes: int, gpus: int,
              memory_gib: int) -> tuple[k8s.ApiClient, list[str]]:
    """kwok (appended to ``procs``) and ``nodes`` Ready GPU nodes on ``plane``; their names."""
    plane.apply_crd_files(project_crd_files(REPO))
    procs.append(start_kwok(plane, work / "kwok"))
    api = plane.api_client()
    core = k8s.CoreV1Api(api)
    names = [f"gpu-{i:04d}" for i in range(nodes)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: core.create_node(
            gpu_node_manifest(n, gpus=gpus, gpu_memory_gib=memory_gib)), names))
    while sum(1 for n in core.list_node().items if any(
            c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))) < nodes:
        time.sleep(0.5)
    return api, names


def service_env(nats_url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "ALNAIR_NATS_URL": nats_url, "ALNAIR_LOG_LEVEL": "warning",
            "ALNAIR_LOG_FORMAT": "json", "ALNAIR_NODE_NAME": "bench", **extra}


def start_bridge(env: dict[str, str], kubeconfig: Path, namespace: str, work: Path) -> ServerProcess:
    return ServerProcess("kube-bridge", [sys.executable, "-m", "alnair_kube_bridge"],
                         work / f"bridge-{namespace or 'all'}.log",
                         env={**env, "ALNAIR_KUBECONFIG": str(kubeconfig),
                              "ALNAIR_WATCH_NAMESPACE": namespace,
                              "ALNAIR_DATA_DIR": str(work / f"bridge-{namespace or 'all'}")})


def publish_inventories(nats_url: str, names: list[str], gpus: int, memory_gib: int) -> None:
    """Each node's NodeInventory, in its bucket and on its subject, as the device plugin does."""
    import asyncio

    from alnair_common import Bus, TypedKV, ensure_streams

    async def inventories() -> None:
        bus = await Bus.connect(nats_url, service="bench")
        await ensure_streams(bus)
        kv = await TypedKV.open(bus, subjects.NODE_INVENTORY_BUCKET, inventory_pb2.NodeInventory)
        for n in names:
            inv = inventory_pb2.NodeInventory(node=n, gpus=[inventory_pb2.Gpu(
                uuid=f"GPU-{n}-{i}", index=i, memory_bytes=memory_gib * GIB,
                health=inventory_pb2.GPU_HEALTH_HEALTHY, vgpu_memory_gib=memory_gib,
                vgpu_compute_percent=100) for i in range(gpus)])
            await kv.put(n, inv)
            await bus.publish(subjects.node_inventory(n), inv)
        await bus.drain()

    asyncio.run(inventories())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--memory-gib", type=int, default=80)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="create pods at this many per second (0: as fast as 8 threads can)")
    ap.add_argument("--kube-api-qps", type=float, default=0.0,
                    help="kube-scheduler's client rate limit (burst twice that); 0 keeps its "
                         "defaults, 50 requests/s with bursts of 100")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--py-spy", type=Path, help="py-spy binary: profile kube-bridge and the "
                    "scheduler during Alnair's batch (collapsed stacks in the log folder)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    requests = [(rng.choice(SIZES), rng.choice(COMPUTE)) for _ in range(args.pods)]
    work = Path(tempfile.mkdtemp(prefix="alnair-bench-"))
    testbin = locate()
    procs: list[Any] = []
    t0 = time.time()
    plane = start_kube_plane(testbin, work / "plane")
    try:
        api, names = gpu_nodes(plane, work, procs, args.nodes, args.gpus, args.memory_gib)
        setup = {"plane_and_nodes_seconds": round(time.time() - t0, 1)}

        nats = NatsServer(store_dir=work / "js", port=free_port())
        nats.start()
        procs.append(nats)
        env = service_env(nats.url)
        kubeconfig = plane.write_kubeconfig(work / "kubeconfig")
        bridge = start_bridge(env, kubeconfig, "bench-alnair", work)
        procs.append(bridge)
        sched = ServerProcess("scheduler", [sys.executable, "-m", "alnair_scheduler"],
                              work / "scheduler.log", env=env)
        procs.append(sched)
        publish_inventories(nats.url, names, args.gpus, args.memory_gib)
        time.sleep(3)  # both services connected and replayed (their logs say so)
        spies = [subprocess.Popen([str(args.py_spy), "record", "--nonblocking",
                                   "--format", "raw", "--rate", "100", "-p", str(p.pid),
                                   "-o", str(work / f"{p.name}.stacks")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for p in (bridge, sched)] if args.py_spy else []
        alnair = run_batch(api, "bench-alnair", "alnair-scheduler", requests, args.timeout,
                           nats.url, args.rate, work / "pods-alnair.json")
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)

        ks = ServerProcess("kube-scheduler", [
            testbin.path("kube-scheduler"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false", "--secure-port=0", "-v=0",
            *([f"--kube-api-qps={args.kube_api_qps:g}",
               f"--kube-api-burst={int(2 * args.kube_api_qps)}"] if args.kube_api_qps else [])],
            work / "kube-scheduler.log")
        procs.append(ks)
        time.sleep(3)
        default = run_batch(api, "bench-default", "default-scheduler", requests, args.timeout,
                            rate=args.rate, trace=work / "pods-kube-scheduler.json")
        result = {"nodes": args.nodes, "gpus_per_node": args.gpus, "pods": args.pods,
                  "cpus": os.cpu_count(), "kube_scheduler_api_qps": args.kube_api_qps or
                  "default (50, burst 100)", **setup, "alnair": alnair, "kube_scheduler": default,
                  "throughput_ratio_alnair_over_kube": round(
                      alnair["throughput_pods_per_second"] /
                      max(default["throughput_pods_per_second"], 1e-9), 2),
                  "logs": str(work)}
        emit(result, args.out)
    finally:
        tear_down(procs, plane)


def emit(result: dict[str, Any], out: Path | None) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")


def tear_down(procs: list[Any], plane: Any) -> None:
    for p in reversed(procs):
        try:
            p.stop()
        except Exception as e:  # noqa: BLE001 - tear everything down regardless
            print(f"stop {p}: {e!r}", file=sys.stderr)
    plane.stop()


if __name__ == "__main__":
    main()
