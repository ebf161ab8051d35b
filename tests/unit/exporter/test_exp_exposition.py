"""The exporter's fast renderer says exactly what prometheus-client's formatter says."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from alnair_exporter._exposition import ExpositionRenderer


class Families:
    def __init__(self, *families) -> None:  # type: ignore[no-untyped-def]
        self.families = families

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.families)

    def describe(self):  # type: ignore[no-untyped-def]
        return iter(())


def _families() -> Families:
    g = GaugeMetricFamily("alnair_gpu_util", 'Help with a \\ backslash\nand a newline.', labels=["pod_name", "a"])
    g.add_metric(['we"ird\\pod\nname', "x"], 99.5)
    g.add_metric(["plain", "y"], float("nan"))
    g.add_metric(["inf", "z"], float("inf"))
    c = CounterMetricFamily("alnair_cuda_kernel_launches", "Launches.", labels=["pod_name"])
    c.add_metric(["p"], 5107)
    return Families(g, c, GaugeMetricFamily("alnair_exporter_simulated", "Sim.", value=1))


def _parsed(text: str) -> list[tuple]:
    return [(f.name, f.type, f.documentation,
             sorted((s.name, tuple(sorted(s.labels.items())), str(s.value)) for s in f.samples))
            for f in text_string_to_metric_families(text)]


def test_same_families_as_prometheus_client() -> None:
    families = _families()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(families)
    ours = ExpositionRenderer().render([families])
    assert _parsed(ours) == _parsed(generate_latest(registry).decode())
    assert "alnair_cuda_kernel_launches_total{pod_name=\"p\"} 5107.0" in ours


def test_label_blocks_are_reused_and_forgotten_when_unused() -> None:
    renderer = ExpositionRenderer()
    renderer.render([_families()])
    assert len(renderer._blocks) == 5  # noqa: SLF001 - four labelled series and the unlabelled one
    g = GaugeMetricFamily("alnair_gpu_util", "x", labels=["pod_name", "a"])
    g.add_metric(["plain", "y"], 1.0)
    renderer.render([Families(g)])
    assert list(renderer._blocks) == [(("pod_name", "plain"), ("a", "y"))]  # noqa: SLF001


def test_other_metric_types_are_refused_with_the_way_out() -> None:
    h = HistogramMetricFamily("alnair_x_seconds", "h", buckets=[("1", 1), ("+Inf", 2)], sum_value=1)
    try:
        ExpositionRenderer().render([Families(h)])
    except ValueError as e:
        assert "process registry" in str(e)
    else:
        raise AssertionError("a histogram must be refused")
