"""The exporter's own health numbers, exposed next to what it measures.

Kept as plain counters in a small collector rather than prometheus-client globals, so two
exporters in one process (tests, benchmarks) never collide in the default registry.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class ExporterStats(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples = 0
        self.sample_errors = 0
        self.publish_errors = 0
        self.pod_resources_errors = 0
        self.last_sample_seconds = 0.0
        self.simulated = False
        self.regions_skipped: Counter[str] = Counter()
        self.malformed: Counter[tuple[str, str]] = Counter()

    def region_skipped(self, reason: str) -> None:
        with self._lock:
            self.regions_skipped[reason] += 1

    def message_malformed(self, subject: str, reason: str) -> None:
        with self._lock:
            self.malformed[(subject, reason)] += 1

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield CounterMetricFamily("alnair_exporter_samples", "Sampling periods completed.", value=self.samples)
            yield CounterMetricFamily("alnair_exporter_sample_errors", "Sampling periods that failed (logged).",
                                      value=self.sample_errors)
            yield CounterMetricFamily("alnair_exporter_publish_errors", "Samples that could not be published.",
                                      value=self.publish_errors)
            yield CounterMetricFamily("alnair_exporter_pod_resources_errors", "Failed kubelet PodResources "
                                      "queries (the last allocations stand).", value=self.pod_resources_errors)
            yield GaugeMetricFamily("alnair_exporter_last_sample_duration_seconds",
                                    "Time the last sampling period took, seconds.", value=self.last_sample_seconds)
            yield GaugeMetricFamily("alnair_exporter_simulated", "1 when GPU data are replayed, not measured.",
                                    value=1.0 if self.simulated else 0.0)
            skipped = CounterMetricFamily("alnair_exporter_regions_skipped", "CUDA regions not read, by reason.",
                                          labels=["reason"])
            for reason, n in sorted(self.regions_skipped.items()):
                skipped.add_metric([reason], n)
            yield skipped
            bad = CounterMetricFamily("alnair_exporter_malformed_messages", "Bus messages dropped as malformed "
                                      "(decode: not the subject's message; invalid: failed validation).",
                                      labels=["subject", "reason"])
            for (subject, reason), n in sorted(self.malformed.items()):
                bad.add_metric([subject, reason], n)
            yield bad

