"""The profiler's own Prometheus metrics (served on the health port's ``/metrics``)."""

from prometheus_client import Counter, Gauge

COMPLETED = Counter("alnair_profiler_profiles_total", "Workload profiles computed, by outcome of the first write.",
                    ["outcome"])
REJECTED = Counter("alnair_profiler_rejected_values_total", "Impossible sample values dropped.",
                   ["metric", "reason"])
WAITING = Gauge("alnair_profiler_profiles_waiting", "Profiles spooled until the store answers.")
