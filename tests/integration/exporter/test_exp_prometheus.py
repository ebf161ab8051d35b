"""A real Prometheus scrapes the exporter replaying a real H200 recording of two PyTorch
processes sharing one GPU; PromQL sees one series per pod with the recorded values.

Expected numbers come from the raw recording (``share_cnn_transformer``), 15 s into the
replay (row t=21.019 s): in that row NVML had no new per-process sample, so the values shown
are the last ones NVML gave — pid 468 (cnn) 99 % SM / 25 % memory bandwidth at t=20.72,
pid 469 (transformer) 99 % / 26 % at t=20.92 — exactly what a live NVML reader would show.
"""

from __future__ import annotations

import asyncio

from exporter_harness import H200_UUID, SHARE, publish_workload, running_exporter, scrape, settings

from alnair.v1 import metrics_pb2
from alnair_common import subjects
from alnair_common.cuda_region import DeviceRecord
from alnair_common.testing import wait_for
from alnair_common.testing.cuda_region_writer import RegionWriter
from alnair_gpu import ReplaySampler, load_recording

POD = 'namespace="ml",node="gpu-node-1",gpu_uuid="{gpu}",pod_name="{pod}"'


def sel(pod: str) -> str:
    return "{" + POD.format(gpu=H200_UUID, pod=pod) + "}"


async def test_prometheus_sees_each_pod_sharing_the_gpu(nats_server, bus, tmp_path, prometheus, promtool) -> None:
    cfg = settings(nats_server.url, tmp_path)
    await publish_workload(bus, "uid-cnn", "cnn-train")
    await publish_workload(bus, "uid-tr", "transformer-train")
    # Each workload's interceptor region lists its processes with their host PIDs (the recording's).
    for uid, host_pid in (("uid-cnn", 468), ("uid-tr", 469)):
        (cfg.workspaces / uid).mkdir()
        region = RegionWriter(cfg.workspaces / uid / "cuda.region", workload_id=uid)
        region.write_slot(0, pid=1, host_pid=host_pid, devices={0: DeviceRecord(kernel_launches=10)})
    batches: list[metrics_pb2.NodeSampleBatch] = []

    async def keep(_: str, batch: metrics_pb2.NodeSampleBatch) -> None:
        batches.append(batch)

    await bus.subscribe(subjects.gpu_metrics("gpu-node-1"), metrics_pb2.NodeSampleBatch, keep)
    gpu = ReplaySampler(load_recording(SHARE), position=lambda: 15.0)
    async with running_exporter(cfg, gpu=gpu, resolver=None) as exporter:
        assert exporter.metrics is not None
        prom = await asyncio.to_thread(prometheus, [f"127.0.0.1:{exporter.metrics.port}"])

        async def value(expr: str) -> float:
            return await asyncio.to_thread(prom.wait_for_value, expr)

        assert await value(f"alnair_gpu_util{sel('cnn-train')}") == 99.0
        assert await value(f"alnair_gpu_util{sel('transformer-train')}") == 99.0
        assert await value(f"alnair_gpu_mem_util{sel('cnn-train')}") == 25.0
        assert await value(f"alnair_gpu_mem_util{sel('transformer-train')}") == 26.0
        assert await value(f"alnair_pod_gpu_memory_used_bytes{sel('cnn-train')}") == 2004877312
        assert await value(f"alnair_pod_gpu_memory_used_bytes{sel('transformer-train')}") == 1283457024
        assert await value(f'count(alnair_gpu_util{{gpu_uuid="{H200_UUID}"}})') == 2
        # the device as dcgm-exporter users know it, in base units
        device = f'{{gpu_uuid="{H200_UUID}",gpu="0",model_name="NVIDIA H200",node="gpu-node-1"}}'
        assert await value(f"alnair_gpu_utilization_ratio{device}") == 0.99
        assert await value(f"alnair_gpu_memory_bandwidth_utilization_ratio{device}") == 0.26
        assert await value(f"alnair_gpu_memory_used_bytes{device}") == 3948412928
        assert await value(f"alnair_gpu_memory_total_bytes{device}") == 150754820096
        assert await value(f"alnair_gpu_power_watts{device}") == 385.462
        assert await value(f"alnair_gpu_temperature_celsius{device}") == 44
        assert await value(f"alnair_gpu_sm_clock_hertz{device}") == 1.98e9
        assert await value(f"alnair_gpu_ecc_uncorrected_errors_total{device}") == 0
        assert await value("alnair_exporter_simulated") == 1
        # per-pod memory adds up to what the processes hold; the rest is the driver's
        assert await value("sum(alnair_pod_gpu_memory_used_bytes)") == 2004877312 + 1283457024

        assert promtool(await scrape(exporter)) == []

    await wait_for(lambda: _true(len(batches) > 0), what="a NodeSampleBatch on the bus")
    batch = batches[-1]
    assert batch.node == "gpu-node-1" and batch.simulated
    assert [g.gpu_uuid for g in batch.gpus] == [H200_UUID]
    owners = {p.pid: (p.workload.uid, p.workload.name, p.workload.namespace, round(p.sm_utilization_ratio, 2))
              for p in batch.processes}
    assert owners == {468: ("uid-cnn", "cnn-train", "ml", 0.99), 469: ("uid-tr", "transformer-train", "ml", 0.99)}


async def _true(value: bool) -> bool:
    return value
