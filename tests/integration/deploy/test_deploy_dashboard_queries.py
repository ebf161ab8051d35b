"""Every Grafana query, run in a real Prometheus that scrapes the real exporter.

The exporter replays the real H200 recording of two PyTorch processes sharing one GPU (the
GPU is the only fake), with an interceptor region per workload carrying its limits, the
pods' allocations from a kubelet PodResources server (alnair_kubelet's real gRPC test
kubelet on a unix socket), and the workloads from bus events, as on a node. The test then
checks, for every query of every dashboard (Grafana variables set to "All"):

* each metric it names is in the exposition, served by the exporter or by the scheduler,
  profiler, cache hydrator and bus client registries that the services serve on their own /metrics;
* Prometheus accepts it (PromQL syntax and functions);
* a query over exporter metrics returns series: the panel shows data on a real node.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

from deploy_render import K8S
from prometheus_client.parser import text_string_to_metric_families

import alnair_cache_hydrator  # noqa: F401  (registers the cache hydrator's metrics)
import alnair_profiler  # noqa: F401  (registers the profiler's metrics, as its process does)
import alnair_scheduler  # noqa: F401  (registers the scheduler's metrics)
from alnair.v1 import workload_pb2
from alnair_common import Bus, ensure_streams, subjects
from alnair_common.cuda_region import DeviceRecord
from alnair_common.testing.cuda_region_writer import RegionWriter
from alnair_exporter import ExporterService, ExporterSettings
from alnair_gpu import ReplaySampler, load_recording
from alnair_kubelet.api import podresources as pr
from alnair_kubelet.testing import PodResourcesHarness

H200_UUID = "GPU-f2b4712f-9931-af4b-7a24-58183960c4b7"  # the recorded card
SHARE = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200" / "share_cnn_transformer.jsonl.gz"
DASHBOARDS = K8S / "base" / "grafana" / "dashboards"
EXPORTER_PREFIXES = ("alnair_gpu_", "alnair_pod_", "alnair_cuda_", "alnair_exporter_")
GIB = 1 << 30
# (uid, pod, host pid in the recording, memory limit GiB, compute percent)
WORKLOADS = (("uid-cnn", "cnn-train", 468, 8, 30), ("uid-tr", "transformer-train", 469, 16, 50))


def sample_names(exposition: str) -> set[str]:
    """Every series name a query may use: counters as ``_total``, histograms' parts."""
    names = set()
    for family in text_string_to_metric_families(exposition):
        if family.type == "counter":
            names |= {f"{family.name}_total"}
        elif family.type == "histogram":
            names |= {f"{family.name}_{part}" for part in ("bucket", "sum", "count")}
        else:
            names.add(family.name)
    return names


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and variable, variables expanded to "All"."""
    queries = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                queries.append((f"{path.name}: {panel['title']}", target["expr"]))
        for var in board["templating"]["list"]:
            # label_values(metric{selector}, label) is Grafana's; its PromQL twin:
            metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)", var["definition"]).groups()
            queries.append((f"{path.name}: variable {var['name']}", f"count by ({label}) ({metric})"))
    return [(where, re.sub(r"\$\w+", ".*", expr)) for where, expr in queries]


async def publish_workload(bus: Bus, uid: str, name: str) -> None:
    event = workload_pb2.WorkloadEvent(sequence=1, source="deploy-test")
    event.workload.ref.uid, event.workload.ref.name, event.workload.ref.namespace = uid, name, "ml"
    event.workload.phase = workload_pb2.WORKLOAD_PHASE_RUNNING
    event.workload.node = "gpu-node-1"
    await bus.publish(subjects.workload_events(), event)


def cgroup_v2_root() -> Path:
    hybrid = Path("/sys/fs/cgroup/unified")
    return hybrid if (hybrid / "cgroup.procs").exists() else Path("/sys/fs/cgroup")


def allocated_pod(name: str, memory_gib: int, compute: int) -> pr.PodResources:
    """A pod as the kubelet's PodResources lists it: one device id per GiB and per percent."""
    devices = [pr.ContainerDevices(resource_name="alnair/vgpu-memory",
                                   device_ids=[f"{H200_UUID}-m{k}" for k in range(memory_gib)]),
               pr.ContainerDevices(resource_name="alnair/vgpu-compute",
                                   device_ids=[f"{H200_UUID}-c{k}" for k in range(compute)])]
    return pr.PodResources(name=name, namespace="ml", containers=[pr.ContainerResources(name="main", devices=devices)])


async def test_dashboard_queries_name_exported_metrics_and_show_data(nats_server, bus, tmp_path, prometheus) -> None:
    await ensure_streams(bus)
    kubelet = PodResourcesHarness(tmp_path / "pod-resources" / "kubelet.sock")  # a real gRPC server
    kubelet.pods = [allocated_pod(pod, memory_gib, compute) for _, pod, _, memory_gib, compute in WORKLOADS]
    await kubelet.start()
    workspaces = tmp_path / "workspaces"
    # A live process stands for a pod's host side (CPU, memory of its cgroup): the replayed
    # PIDs do not exist on this machine.
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", "import sys; sys.stdin.read()",
                                                 stdin=asyncio.subprocess.PIPE)
    await publish_workload(bus, "uid-host", "data-loader")
    (workspaces / "uid-host").mkdir(parents=True)
    RegionWriter(workspaces / "uid-host" / "cuda.region", workload_id="uid-host").write_slot(
        0, pid=1, host_pid=child.pid, devices={})
    # Memory of a cgroup needs the v2 memory controller; hybrid hosts (like some CI machines)
    # keep it on v1, and then no exporter can show it: only there is that panel excused.
    unified = Path((await asyncio.to_thread(Path(f"/proc/{child.pid}/cgroup").read_text)).split("0::", 1)[1].split()[0])
    excused = set() if (cgroup_v2_root() / unified.relative_to("/") / "memory.current").exists() \
        else {"alnair_pod_memory_bytes"}
    for uid, pod, host_pid, memory_gib, compute in WORKLOADS:
        await publish_workload(bus, uid, pod)
        (workspaces / uid).mkdir()
        region = RegionWriter(workspaces / uid / "cuda.region", workload_id=uid,
                              memory_limit_bytes=memory_gib * GIB, compute_percent=compute)
        region.write_slot(0, pid=1, host_pid=host_pid, devices={0: DeviceRecord(
            kernel_launches=1000, memory_used_bytes=GIB, memcpy_htod_bytes=4096, throttled_ns=10**6)})
    settings = ExporterSettings(nats_url=nats_server.url, node_name="gpu-node-1", health_port=0, gpu_source="none",
                                workspaces_dir=workspaces, data_dir=tmp_path / "data", sample_period_seconds=0.2,
                                log_format="console", cgroup_root=cgroup_v2_root(), metrics_port=0,
                                host_period_seconds=0.2, pod_resources_socket=kubelet.socket)
    exporter = ExporterService(settings, gpu=ReplaySampler(load_recording(SHARE), position=lambda: 15.0),
                               resolver=None)
    task = asyncio.create_task(exporter.run())
    try:
        await asyncio.wait_for(exporter.ready.wait(), 20)
        assert exporter.metrics is not None
        target = f"127.0.0.1:{exporter.metrics.port}"
        prom = await asyncio.to_thread(prometheus, [target])
        # Two scrapes at least, so that rate() and increase() have their two samples.
        await asyncio.to_thread(prom.wait_for_value, "count_over_time(alnair_exporter_simulated[1m]) >= 3")
        import httpx

        async with httpx.AsyncClient() as client:
            exposition = (await client.get(f"http://{target}/metrics", timeout=10)).text
        exported = sample_names(exposition)
        problems = []
        for where, expr in dashboard_queries():
            named = set(re.findall(r"\balnair_[a-z0-9_]+", expr))
            missing = named - exported
            if missing:
                problems.append(f"{where}: {sorted(missing)} not exported")
                continue
            result = await asyncio.to_thread(prom.query, expr)  # raises on invalid PromQL
            if all(n.startswith(EXPORTER_PREFIXES) for n in named) and not result and not named <= excused:
                problems.append(f"{where}: no data from a replaying exporter: {expr}")
        assert not problems, "dashboard queries that would show nothing:\n" + "\n".join(problems)
        # What the sharing dashboard draws for the card: the kubelet's allocation and the
        # interceptor's limits agree (8 + 16 GiB, 30 + 50 %).
        for metric, expected in (("alnair_pod_gpu_allocated_memory_bytes", 24 * GIB),
                                 ("alnair_cuda_memory_limit_bytes", 24 * GIB),
                                 ("alnair_pod_gpu_allocated_compute_ratio", 0.8),
                                 ("alnair_cuda_compute_limit_ratio", 0.8)):
            result = await asyncio.to_thread(prom.query, f"sum by (gpu_uuid) ({metric})")
            assert [(r["metric"]["gpu_uuid"], round(float(r["value"][1]), 6)) for r in result] == \
                [(H200_UUID, expected)], f"{metric}: {result}"
    finally:
        exporter.request_stop()
        await asyncio.wait_for(task, 20)
        child.kill()
        await child.wait()
        await kubelet.stop()
