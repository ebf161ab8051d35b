"""What every collector shares: where the current view comes from, and the label sets.

Collectors read the latest immutable :class:`NodeView`; they never measure anything
themselves, so a scrape costs formatting only (the sampling loop pays for measuring).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from .._view import NodeView
from .._workloads import WorkloadInfo

ViewSource = Callable[[], NodeView | None]

POD_LABELS = ("pod_name", "namespace", "node")
POD_GPU_LABELS = (*POD_LABELS, "gpu_uuid")
DEVICE_LABELS = ("node", "gpu", "gpu_uuid", "model_name")


def pod_labels(workload: WorkloadInfo, node: str) -> list[str]:
    return [workload.name, workload.namespace, node]


def label_set(names: Iterable[str], values: Iterable[str]) -> dict[str, str]:
    """One series' labels, built once and shared by every family that series appears in."""
    return dict(zip(names, values, strict=True))


def add(family: Metric, labels: dict[str, str], value: float) -> None:
    """What ``add_metric`` does, minus rebuilding the label dict for each family: thousands of
    pod series make that the larger part of a scrape."""
    name = family.name + "_total" if family.type == "counter" else family.name
    family.samples.append(Sample(name, labels, value, None, None))


def gauge(name: str, doc: str, labels: Iterable[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels), unit=unit)


def counter(name: str, doc: str, labels: Iterable[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=list(labels))


class ViewCollector(Collector):
    """Base of the collectors over the node view; subclasses implement :meth:`families`."""

    def __init__(self, view: ViewSource) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        view = self._view()
        if view is None:
            return iter(())
        return iter(self.families(view))

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names depend on nothing but the code; skip the registry's dry run

    def families(self, view: NodeView) -> list[Metric]:
        raise NotImplementedError
