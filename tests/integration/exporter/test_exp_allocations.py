"""Pod allocations from the kubelet's PodResources API (a real gRPC server on a unix socket):
exposed per pod and GPU, and naming the card of a pod's CUDA region."""

from __future__ import annotations

from exporter_harness import publish_workload, running_exporter, scrape, series, settings

from alnair_common.cuda_region import DeviceRecord
from alnair_common.testing import wait_for
from alnair_common.testing.cuda_region_writer import RegionWriter
from alnair_kubelet.api import podresources as pr
from alnair_kubelet.testing import PodResourcesHarness

CARD = "GPU-f2b4712f-9931-af4b-7a24-58183960c4b7"
OTHER = "GPU-00000000-1111-2222-3333-444444444444"


def _pod(namespace: str, name: str, devices: dict[str, list[str]]) -> pr.PodResources:
    container = pr.ContainerResources(name="main", devices=[
        pr.ContainerDevices(resource_name=resource, device_ids=ids) for resource, ids in devices.items()])
    return pr.PodResources(name=name, namespace=namespace, containers=[container])


async def test_allocations_are_exposed_and_name_the_card_of_a_region(nats_server, bus, tmp_path, promtool) -> None:
    kubelet = PodResourcesHarness(tmp_path / "pod-resources" / "kubelet.sock")
    kubelet.pods = [
        _pod("ml", "train-a", {"alnair/vgpu-memory": [f"{CARD}-m{k}" for k in range(8)],
                               "alnair/vgpu-compute": [f"{CARD}-c{k}" for k in range(30)]}),
        _pod("ml", "infer-b", {"alnair/vgpu-memory": [f"{OTHER}-m0", f"{OTHER}-m1"], "nvidia.com/gpu": ["x"]}),
    ]
    await kubelet.start()
    try:
        cfg = settings(nats_server.url, tmp_path, pod_resources_socket=kubelet.socket)
        await publish_workload(bus, "uid-a", "train-a", "ml")  # no assignment in the event
        (cfg.workspaces / "uid-a").mkdir()
        RegionWriter(cfg.workspaces / "uid-a" / "cuda.region", workload_id="uid-a").write_slot(
            0, pid=1, devices={0: DeviceRecord(kernel_launches=42)})
        async with running_exporter(cfg, gpu=None, resolver=None) as exporter:

            async def allocated() -> dict[str, float] | None:
                got = series(await scrape(exporter), "alnair_pod_gpu_allocated_memory_bytes")
                return got if len(got) == 2 else None

            memory = await wait_for(allocated, what="both pods' allocations exposed")
            a = f'{{gpu_uuid="{CARD}",namespace="ml",node="gpu-node-1",pod_name="train-a"}}'
            b = f'{{gpu_uuid="{OTHER}",namespace="ml",node="gpu-node-1",pod_name="infer-b"}}'
            assert memory == {a: 8 * (1 << 30), b: 2 * (1 << 30)}

            async def launches() -> dict[str, float] | None:
                got = series(await scrape(exporter), "alnair_cuda_kernel_launches_total")
                return got if a in got else None

            # CUDA ordinal 0 of a pod holding one card is that card
            assert await wait_for(launches, what="the region's card named") == {a: 42}
            text = await scrape(exporter)
            assert series(text, "alnair_pod_gpu_allocated_compute_ratio") == {a: 0.3}
            assert promtool(text) == []
            # the kubelet goes away: the last allocations stand and the failure is counted
            await kubelet.stop()

            async def failed() -> bool:
                return series(await scrape(exporter), "alnair_exporter_pod_resources_errors_total")[""] > 0

            await wait_for(failed, timeout=15, what="the PodResources failure counted")
            assert len(series(await scrape(exporter), "alnair_pod_gpu_allocated_memory_bytes")) == 2
    finally:
        await kubelet.stop()
