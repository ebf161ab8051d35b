"""Regions written by the interceptor's real C code (its deterministic test workloads on the
fake libcuda) reach the bus and the exposition under the pod's labels."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from exporter_harness import publish_workload, running_exporter, scrape, series, settings

from alnair.v1 import metrics_pb2
from alnair_common.testing import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interceptor"))
from interceptor_harness import NativeBuild  # noqa: E402 - the interceptor tests' build harness

MiB = 1 << 20


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> NativeBuild:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.fail("these tests build the interceptor: apt-get install build-essential")
    cache = os.environ.get("ALNAIR_CUDA_BUILD_DIR")
    return NativeBuild(root=Path(cache) if cache else tmp_path_factory.mktemp("cuda_intercept_exp"))


async def test_c_written_regions_become_cuda_samples_with_pod_labels(native, nats_server, bus, tmp_path) -> None:
    cfg = settings(nats_server.url, tmp_path, grace_seconds=6.0)
    # the fixture workload names itself "fixture/ns/pod" (namespace/pod/container): its workspace
    # directory name means nothing here, the header's workload id finds the pod
    (cfg.workspaces / "some-dir").mkdir()
    shutil.copy(native.workspace("release", "region_fixture") / "cuda.region", cfg.workspaces / "some-dir")
    (cfg.workspaces / "uid-fork").mkdir()
    shutil.copy(native.workspace("release", "threads_and_fork") / "cuda.region", cfg.workspaces / "uid-fork")
    (cfg.workspaces / "uid-names").mkdir()
    shutil.copy(native.workspace("release", "kernel_names") / "cuda.region", cfg.workspaces / "uid-names")
    await publish_workload(bus, "uid-fix", "ns", "fixture")
    await publish_workload(bus, "uid-fork", "forker", "ml")
    await publish_workload(bus, "uid-names", "trainer", "ml")
    samples: dict[str, metrics_pb2.CudaSample] = {}

    async def keep(_: str, sample: metrics_pb2.CudaSample) -> None:
        samples[sample.workload.uid] = sample

    await bus.subscribe("alnair.metrics.cuda.gpu-node-1.*", metrics_pb2.CudaSample, keep)
    async with running_exporter(cfg, gpu=None, resolver=None) as exporter:
        await wait_for(lambda: _has(samples, {"uid-fix", "uid-fork", "uid-names"}), what="CUDA samples of all three")
        fix = samples["uid-fix"]
        assert (fix.workload.name, fix.workload.namespace) == ("ns", "fixture")
        assert fix.kernel_launches_total == 1000 + 10  # kernels + graph launches the C workload made
        assert fix.memcpy_htod_bytes_total == 3 * MiB + 64 * 32
        assert fix.memcpy_dtoh_bytes_total == 2 * 512 * 1024 and fix.memcpy_dtod_bytes_total == 4096
        assert fix.memory_limit_bytes == 1 << 30 and fix.memory_used_bytes == 0 and fix.processes == 0
        assert samples["uid-fork"].kernel_launches_total == 64 * 200 + 5 * 10  # parent threads + 5 children
        # the C workload's kernels: 300 backward + 50 multi_tensor_apply of 1150, a forked child's 100 custom
        names = samples["uid-names"]
        assert (names.kernel_launches_total, names.training_kernel_launches_total) == (1150 + 10 + 100, 350)
        assert names.kernel_names_read and names.torch_kernels_seen
        assert not fix.kernel_names_read and fix.training_kernel_launches_total == 0  # made-up handles: no names

        labels = '{gpu_uuid="",namespace="fixture",node="gpu-node-1",pod_name="ns"}'
        text = await scrape(exporter)  # within the grace period of these exited workloads
        assert series(text, "alnair_cuda_kernel_launches_total")[labels] == 1010
        assert series(text, "alnair_cuda_memory_limit_bytes")[labels] == 1 << 30
        training = series(text, "alnair_cuda_training_kernel_launches_total")
        assert training == {'{gpu_uuid="",namespace="ml",node="gpu-node-1",pod_name="trainer"}': 350}
        # every process of both has exited: the series go once the grace period is over
        await wait_for(lambda: _gone(exporter), timeout=30, what="exited workloads' series gone")


async def _has(samples: dict, uids: set[str]) -> bool:
    return set(samples) >= uids


async def _gone(exporter) -> bool:  # type: ignore[no-untyped-def]
    return not series(await scrape(exporter), "alnair_cuda_kernel_launches_total")
