"""Container maxima from Prometheus (cAdvisor metrics), over a pod's lifetime.

Only cAdvisor sees a container's whole cgroup (every process, page cache, network namespace),
so in Kubernetes mode the profiler asks Prometheus, over its HTTP API, for the maximum of
CPU, memory, disk I/O and network over ``[started_at, finished_at]`` with ``max_over_time``
on a subquery, and for the series itself (``query_range``) to backfill deciles where the bus
samples are thinner (the profiler was down for part of the pod's life). A Prometheus that
does not answer costs the merge, never the record: the caller writes what it has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import httpx

from alnair_common import TemporaryError

from ._errors import ProfilerError
from ._series import SeriesSummary


class PrometheusError(ProfilerError, TemporaryError):
    """Prometheus did not answer, or rejected a query."""


def _selector(namespace: str, pod: str, *, container: bool) -> str:
    def q(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"')
    extra = ',container!=""' if container else ""
    return f'namespace="{q(namespace)}",pod="{q(pod)}"{extra}'


def expressions(namespace: str, pod: str, window: str) -> dict[str, str]:
    """PromQL per profile series. ``container!=""`` skips cAdvisor's pod-level cgroup row,
    which would count every container twice; network is per pod (one namespace), so no filter."""
    c = _selector(namespace, pod, container=True)
    n = _selector(namespace, pod, container=False)
    return {
        "cpu_cores": f"sum(rate(container_cpu_usage_seconds_total{{{c}}}[{window}]))",
        "memory_bytes": f"sum(container_memory_working_set_bytes{{{c}}})",
        "disk_io_bytes_per_second":
            f'sum(rate({{__name__=~"container_fs_(reads|writes)_bytes_total",{c}}}[{window}]))',
        "network_bytes_per_second":
            f'sum(rate({{__name__=~"container_network_(receive|transmit)_bytes_total",{n}}}[{window}]))',
    }


@dataclass(frozen=True)
class PodUsage:
    maxima: dict[str, float]
    series: dict[str, SeriesSummary]


class PrometheusClient:
    def __init__(self, url: str, *, rate_window_seconds: float = 30.0, resolution_seconds: float = 5.0,
                 timeout_seconds: float = 2.0) -> None:
        self.url = url.rstrip("/")
        self.window = f"{max(1, round(rate_window_seconds))}s"
        self.resolution = max(1, round(resolution_seconds))
        self.timeout = timeout_seconds

    async def pod_usage(self, namespace: str, pod: str, start: datetime, end: datetime) -> PodUsage:
        duration = max(1, math.ceil((end - start).total_seconds()))
        maxima: dict[str, float] = {}
        series: dict[str, SeriesSummary] = {}
        step = max(self.resolution, math.ceil(duration / 1000))
        # Evaluation points anchored on the end, so the pod's last moments are always queried.
        last = round(end.timestamp(), 3)
        first = last - step * math.floor((end - start).total_seconds() / step)
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout) as client:
            for name, expr in expressions(namespace, pod, self.window).items():
                top = await self._query(client, "/api/v1/query", {
                    "query": f"max_over_time(({expr})[{duration}s:{self.resolution}s])",
                    "time": f"{end.timestamp():.3f}"})
                values = [float(v[1]) for r in top for v in [r["value"]]]
                if values:
                    maxima[name] = max(values)
                ranged = await self._query(client, "/api/v1/query_range", {
                    "query": expr, "start": f"{first:.3f}", "end": f"{last:.3f}",
                    "step": f"{step}s"})
                points = [float(v[1]) for r in ranged for v in r["values"]]
                points = [p for p in points if math.isfinite(p) and p >= 0]
                if points:
                    series[name] = SeriesSummary.of(points)
        return PodUsage(maxima, series)

    async def _query(self, client: httpx.AsyncClient, path: str, params: dict[str, str]) -> list[dict]:  # type: ignore[type-arg]
        try:
            response = await client.get(path, params=params)
        except httpx.HTTPError as e:
            raise PrometheusError(f"Prometheus {self.url}{path} did not answer: {e!r}") from e
        try:
            body = response.json()
        except ValueError as e:
            raise PrometheusError(f"Prometheus {self.url}{path} answered HTTP {response.status_code} "
                                  f"with no JSON: {response.text[:200]!r}") from e
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"Prometheus rejected {params['query']!r}: HTTP {response.status_code} "
                                  f"{body.get('errorType')}: {body.get('error')}")
        return list(body["data"]["result"])
