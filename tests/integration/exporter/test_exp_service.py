"""The exporter as a service: readiness follows sampling, a busy metrics port does not stop it."""

from __future__ import annotations

import socket

import httpx
from exporter_harness import running_exporter, scrape, series, settings

from alnair_common.testing import wait_for


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
