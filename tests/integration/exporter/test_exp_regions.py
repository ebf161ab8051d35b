"""Interceptor regions become CUDA samples on the bus and per-pod series; finished workloads
disappear after the grace period; bad regions and bad bus messages are counted and logged
while the exporter keeps serving."""

from __future__ import annotations

import struct

from exporter_harness import publish_workload, running_exporter, scrape, series, settings

from alnair.v1 import metrics_pb2, workload_pb2
from alnair_common import subjects
from alnair_common.cuda_region import HEADER_BYTES, REGION_BYTES, DeviceRecord
from alnair_common.testing import wait_for
from alnair_common.testing.cuda_region_writer import RegionWriter

GiB = 1 << 30
ASSIGNED = "GPU-f2b4712f-9931-af4b-7a24-58183960c4b7"


async def test_region_counters_reach_the_bus_and_the_exposition_with_the_pod_labels(nats_server, bus, tmp_path,
                                                                                    promtool) -> None:
    cfg = settings(nats_server.url, tmp_path)
    await publish_workload(bus, "uid-a", "train-a", "team", gpu_uuid=ASSIGNED)
    (cfg.workspaces / "uid-a").mkdir()
    region = RegionWriter(cfg.workspaces / "uid-a" / "cuda.region", workload_id="team/train-a/main",
                          memory_limit_bytes=8 * GiB, compute_percent=30)
    region.write_slot(0, pid=10, devices={0: DeviceRecord(
        memory_used_bytes=3 * GiB, kernel_launches=5000, graph_launches=7, memcpy_htod_bytes=1000,
        memcpy_dtoh_bytes=2000, memcpy_dtod_bytes=3000, throttled_ns=1_500_000_000, tokens_available=-4,
        sm_util_percent=27, training_kernel_launches=4000, kernel_names_read=True, torch_kernels_seen=True)},
        iteration_period_launches=73, iteration_period_ns=250_000_000, iterations=12)
    region.write_slot(1, pid=11, state="exited", devices={0: DeviceRecord(
        kernel_launches=100, training_kernel_launches=60, kernel_names_read=True)})
    cuda: list[tuple[str, metrics_pb2.CudaSample]] = []

    async def keep(subject: str, sample: metrics_pb2.CudaSample) -> None:
        cuda.append((subject, sample))

    await bus.subscribe("alnair.metrics.cuda.gpu-node-1.*", metrics_pb2.CudaSample, keep)
    async with running_exporter(cfg, gpu=None, resolver=None) as exporter:
        await wait_for(lambda: _ready(cuda), what="a CUDA sample on the bus")
        subject, sample = cuda[-1]
        assert subject == subjects.cuda_metrics("gpu-node-1", "uid-a")
        assert (sample.workload.uid, sample.workload.name, sample.workload.namespace) == ("uid-a", "train-a", "team")
        assert sample.node == "gpu-node-1" and sample.gpu_uuid == ASSIGNED
        assert sample.kernel_launches_total == 5000 + 7 + 100  # the exited process's launches still count
        assert sample.memory_used_bytes == 3 * GiB and sample.memory_limit_bytes == 8 * GiB
        assert sample.compute_limit_percent == 30 and sample.tokens_available == -4
        assert (sample.memcpy_htod_bytes_total, sample.memcpy_dtoh_bytes_total,
                sample.memcpy_dtod_bytes_total) == (1000, 2000, 3000)
        assert sample.throttled_seconds_total == 1.5 and sample.processes == 1
        assert sample.launch_period_seconds == 0.25 and sample.launch_period_repeats == 12
        assert sample.HasField("sm_utilization_ratio") and sample.sm_utilization_ratio == 0.27
        assert sample.training_kernel_launches_total == 4000 + 60  # summed like the launches
        assert sample.kernel_names_read and sample.torch_kernels_seen

        text = await scrape(exporter)
        labels = f'{{gpu_uuid="{ASSIGNED}",namespace="team",node="gpu-node-1",pod_name="train-a"}}'
        assert series(text, "alnair_cuda_memory_used_bytes") == {labels: 3 * GiB}
        assert series(text, "alnair_cuda_memory_limit_bytes") == {labels: 8 * GiB}
        assert series(text, "alnair_cuda_kernel_launches_total") == {labels: 5107}
        assert series(text, "alnair_cuda_compute_limit_ratio") == {labels: 0.3}
        assert series(text, "alnair_cuda_available_tokens") == {labels: -4}
        assert series(text, "alnair_cuda_throttled_seconds_total") == {labels: 1.5}
        assert series(text, "alnair_cuda_sm_utilization_ratio") == {labels: 0.27}
        assert series(text, "alnair_cuda_training_kernel_launches_total") == {labels: 4060}
        assert len(series(text, "alnair_cuda_memcpy_bytes_total")) == 3
        assert promtool(text) == []


async def test_finished_workloads_disappear_after_the_grace_period(nats_server, bus, tmp_path) -> None:
    cfg = settings(nats_server.url, tmp_path, grace_seconds=1.0)
    regions = {}
    for uid in ("uid-exits", "uid-deleted", "uid-stays"):
        await publish_workload(bus, uid, uid.removeprefix("uid-"))
        (cfg.workspaces / uid).mkdir()
        regions[uid] = RegionWriter(cfg.workspaces / uid / "cuda.region", workload_id=uid)
        regions[uid].write_slot(0, pid=5, devices={0: DeviceRecord(memory_used_bytes=1 << 20, kernel_launches=1)})
    async with running_exporter(cfg, gpu=None, resolver=None) as exporter:

        async def pods() -> set[str]:
            return {k.split('pod_name="')[1].split('"')[0]
                    for k in series(await scrape(exporter), "alnair_cuda_kernel_launches_total")}

        await wait_for(lambda: _eq(pods(), {"exits", "deleted", "stays"}), what="three pods exported")
        # one workload's last process exits; another's pod is deleted while its region still
        # says "active" (a SIGKILLed process never marks its slot)
        regions["uid-exits"].write_slot(0, pid=5, state="exited", devices={0: DeviceRecord(kernel_launches=1)})
        await publish_workload(bus, "uid-deleted", "deleted", phase=workload_pb2.WORKLOAD_PHASE_DELETED, sequence=2)
        # still there within the grace period...
        assert await pods() == {"exits", "deleted", "stays"}
        # ...gone after it; the live workload stays
        await wait_for(lambda: _eq(pods(), {"stays"}), timeout=10, what="finished pods gone after the grace period")


async def test_bad_regions_and_malformed_events_are_counted_and_the_exporter_keeps_serving(
        nats_server, bus, tmp_path) -> None:
    cfg = settings(nats_server.url, tmp_path)
    await publish_workload(bus, "uid-ok", "ok")
    ws = cfg.workspaces
    for name in ("uid-ok", "truncated", "future", "stranger"):
        (ws / name).mkdir()
    RegionWriter(ws / "uid-ok" / "cuda.region", workload_id="uid-ok").write_slot(
        0, pid=1, devices={0: DeviceRecord(kernel_launches=3)})
    (ws / "truncated" / "cuda.region").write_bytes(b"\0" * 100)
    RegionWriter(ws / "future" / "cuda.region", workload_id="future")
    data = bytearray((ws / "future" / "cuda.region").read_bytes())
    struct.pack_into("<I", data, 8, 99)  # layout version 99
    (ws / "future" / "cuda.region").write_bytes(bytes(data))
    RegionWriter(ws / "stranger" / "cuda.region", workload_id="nobody/knows")
    assert len(data) == REGION_BYTES > HEADER_BYTES

    async with running_exporter(cfg, gpu=None, resolver=None) as exporter:
        # garbage on the workload events subject, and an event that names no workload
        await bus.js.publish(subjects.workload_events(), b"\xff\xfe not protobuf")
        await bus.publish(subjects.workload_events(), workload_pb2.WorkloadEvent(sequence=9, source="broken"))

        async def counted() -> dict[str, float] | None:
            text = await scrape(exporter)
            skipped = series(text, "alnair_exporter_regions_skipped_total")
            bad = series(text, "alnair_exporter_malformed_messages_total")
            want = ('{reason="malformed"}', '{reason="unknown_version"}', '{reason="unknown_workload"}')
            if all(k in skipped for k in want) and len(bad) == 2:
                return {**skipped, **bad}
            return None

        found = await wait_for(counted, what="bad regions and messages counted")
        assert found['{reason="decode",subject="alnair.workload.events"}'] == 1
        assert found['{reason="invalid",subject="alnair.workload.events"}'] == 1
        # the good region is exported all the same, and sampling goes on
        async def good() -> list[float]:
            return list(series(await scrape(exporter), "alnair_cuda_kernel_launches_total").values())

        assert await wait_for(good, what="the good region exported") == [3]
        text = await scrape(exporter)
        before = series(text, "alnair_exporter_samples_total")[""]
        await wait_for(lambda: _grew(exporter, before), what="sampling continues")


async def _ready(cuda: list) -> bool:
    return bool(cuda)


async def _eq(got, want) -> bool:  # type: ignore[no-untyped-def]
    return await got == want


async def _grew(exporter, before: float) -> bool:  # type: ignore[no-untyped-def]
    return series(await scrape(exporter), "alnair_exporter_samples_total")[""] > before


async def test_a_workload_placed_on_another_node_is_not_attributed_here(nats_server, bus, tmp_path) -> None:
    cfg = settings(nats_server.url, tmp_path)
    await publish_workload(bus, "uid-here", "here")
    await publish_workload(bus, "uid-moved", "moved", sequence=1, node="")  # pending: no node yet
    await publish_workload(bus, "uid-moved", "moved", sequence=2, node="gpu-node-2")  # bound elsewhere
    for uid in ("uid-here", "uid-moved"):
        (cfg.workspaces / uid).mkdir()
        RegionWriter(cfg.workspaces / uid / "cuda.region", workload_id=uid).write_slot(
            0, pid=1, devices={0: DeviceRecord(kernel_launches=1)})
    async with running_exporter(cfg, gpu=None, resolver=None) as exporter:

        async def skipped() -> bool:
            return '{reason="unknown_workload"}' in series(await scrape(exporter),
                                                          "alnair_exporter_regions_skipped_total")

        await wait_for(skipped, what="the other node's workload skipped")
        pods = series(await scrape(exporter), "alnair_cuda_kernel_launches_total")
        assert [k.split('pod_name="')[1].split('"')[0] for k in pods] == ["here"]


async def test_an_empty_region_waits_for_the_interceptor_and_is_not_malformed(
        nats_server, bus, tmp_path) -> None:
    """The device plugin creates the region empty at Allocate; until the pod's first CUDA call
    lays it out, it is neither counted nor logged as malformed, and once laid out it is read."""
    cfg = settings(nats_server.url, tmp_path)
    await publish_workload(bus, "uid-new", "new")
    (cfg.workspaces / "uid-new").mkdir()
    region = cfg.workspaces / "uid-new" / "cuda.region"
    region.write_bytes(b"")
    async with running_exporter(cfg, gpu=None, resolver=None) as exporter:
        before = series(await scrape(exporter), "alnair_exporter_samples_total")[""]
        await wait_for(lambda: _grew(exporter, before + 1), what="two sampling periods over it")
        skipped = series(await scrape(exporter), "alnair_exporter_regions_skipped_total")
        assert skipped == {}, skipped
        RegionWriter(region, workload_id="uid-new").write_slot(
            0, pid=1, devices={0: DeviceRecord(kernel_launches=5)})

        async def read() -> list[float]:
            return list(series(await scrape(exporter), "alnair_cuda_kernel_launches_total").values())

        assert await wait_for(read, what="the laid-out region exported") == [5]
