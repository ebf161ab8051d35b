"""The exporter as a service: readiness follows sampling, a busy metrics port does not stop it."""

from __future__ import annotations

import socket

import httpx
from exporter_harness import SHARE, running_exporter, scrape, series, settings

from alnair_common.testing import wait_for
from alnair_gpu import GpuSnapshot, ReplaySampler, SampleSourceError, load_recording


async def test_busy_metrics_port_falls_back_and_readiness_reports_sampling(nats_server, tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        cfg = settings(nats_server.url, tmp_path, metrics_port=busy)
        async with running_exporter(cfg, gpu=None, resolver=None) as exporter:
            assert exporter.metrics is not None and exporter.metrics.port != busy
            assert "alnair_exporter_samples_total" in await scrape(exporter)
            assert exporter.http is not None

            async def ready() -> dict | None:
                async with httpx.AsyncClient() as client:
                    r = await client.get(f"http://127.0.0.1:{exporter.http.port}/readyz")
                body = r.json()
                return body if r.status_code == 200 else None

            body = await wait_for(ready, what="exporter ready")
            assert body["checks"] == {"nats": "ok", "sampling": "ok"}
            assert series(await scrape(exporter), "alnair_exporter_simulated") == {"": 0.0}


class FlakyGpu:
    """The GPU boundary failing mid-run (a driver hiccup): real replayed data, then errors."""

    def __init__(self) -> None:
        self.replay = ReplaySampler(load_recording(SHARE), position=lambda: 15.0)
        self.failing = False

    def sample(self) -> GpuSnapshot:
        if self.failing:
            raise SampleSourceError("NVML query of GPU 0 failed: GPU is lost")
        return self.replay.sample()

    def close(self) -> None:
        pass


async def test_a_failing_gpu_is_counted_and_the_last_view_served(nats_server, tmp_path) -> None:
    gpu = FlakyGpu()
    async with running_exporter(settings(nats_server.url, tmp_path), gpu=gpu, resolver=None) as exporter:

        async def device_util() -> dict[str, float]:
            return series(await scrape(exporter), "alnair_gpu_utilization_ratio")

        assert list((await wait_for(device_util, what="device metrics")).values()) == [0.99]
        gpu.failing = True

        async def errors() -> float:
            return series(await scrape(exporter), "alnair_exporter_sample_errors_total")[""]

        await wait_for(errors, what="failed periods counted")
        assert list((await device_util()).values()) == [0.99]  # the last view is still served
        gpu.failing = False
        before = series(await scrape(exporter), "alnair_exporter_samples_total")[""]

        async def recovered() -> bool:
            return series(await scrape(exporter), "alnair_exporter_samples_total")[""] > before

        await wait_for(recovered, what="sampling recovered")
