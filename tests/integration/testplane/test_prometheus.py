"""The ``prometheus`` fixture is a real Prometheus: it scrapes a prometheus_client endpoint
started by the test, keeps the samples over time, and answers PromQL over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest, start_http_server

from alnair_common.testing import wait_until
from alnair_common.testing.prometheus import PrometheusServer, PromQLError

PEAK = 61.5 * 2**30
LATER = 12.0 * 2**30


@pytest.fixture
def exporter() -> Iterator[tuple[str, Gauge, CollectorRegistry]]:
    registry = CollectorRegistry()
    gauge = Gauge("alnair_test_gpu_memory_used_bytes", "GPU memory in use by the test pod",
                  ["pod"], registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{server.server_port}", gauge, registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_scrapes_the_endpoint_and_max_over_time_returns_the_peak(
        prometheus: Callable[..., PrometheusServer],
        exporter: tuple[str, Gauge, CollectorRegistry]) -> None:
    target, gauge, _ = exporter
    gauge.labels(pod="train-0").set(PEAK)
    prom = prometheus([target])

    prom.wait_for_targets_up()
    assert prom.wait_for_value('alnair_test_gpu_memory_used_bytes{pod="train-0"}') == PEAK

    gauge.labels(pod="train-0").set(LATER)
    wait_until(lambda: float(prom.query("alnair_test_gpu_memory_used_bytes")[0]["value"][1])
               == LATER, timeout=15, what="the lower value scraped")

    [sample] = prom.query('max_over_time(alnair_test_gpu_memory_used_bytes{pod="train-0"}[5m])')
    assert float(sample["value"][1]) == PEAK
    assert sample["metric"] == {"instance": target, "job": "target-0", "pod": "train-0"}


def test_bad_promql_is_an_error(prometheus: Callable[..., PrometheusServer]) -> None:
    prom = prometheus([])
    with pytest.raises(PromQLError, match="bad_data"):
        prom.query("max_over_time(up[")


def test_promtool_lints_expositions(promtool: Callable[[str], list[str]],
                                    exporter: tuple[str, Gauge, CollectorRegistry]) -> None:
    _, gauge, registry = exporter
    gauge.labels(pod="p").set(1)
    assert promtool(generate_latest(registry).decode()) == []

    camel = "# HELP gpuRequests Requests.\n# TYPE gpuRequests counter\ngpuRequests 3\n"
    complaints = promtool(camel)
    assert any("_total" in c for c in complaints), complaints
    assert any("camelCase" in c for c in complaints), complaints
