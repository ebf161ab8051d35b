"""A real Prometheus for tests, scraping loopback targets every second, and promtool.

Each call of the ``prometheus(targets)`` fixture starts its own server: start-up takes well
under a second and a server per test means no scrape configuration or time series leak
between tests. Queries go through the HTTP API exactly as Grafana's or the profiler's
would, so PromQL written for production is what the tests run.

Targets are ``"host:port"`` (path ``/metrics``) or full ``http://host:port/path`` URLs;
target number ``i`` is scraped as job ``target-<i>``.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._plane_errors import PlaneError
from ._server_process import ServerProcess
from .testbin import Testbin

START_TIMEOUT_SECONDS = 30.0
QUERY_TIMEOUT_SECONDS = 30.0


class PromQLError(PlaneError):
    """Prometheus rejected a query (bad PromQL) or answered with an error status."""


@dataclass
class PrometheusServer:
    """A running Prometheus and helpers over its query API."""

    url: str
    targets: list[str]
    process: ServerProcess

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Run an instant PromQL query; return the ``result`` vector as parsed JSON."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(address, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            e.close()
            raise PromQLError(f"query {expr!r}: HTTP {e.code}: {detail}") from e
        if body.get("status") != "success":
            raise PromQLError(f"query {expr!r}: {body.get('errorType')}: {body.get('error')}")
        return list(body["data"]["result"])

    def wait_for_value(self, expr: str, *, timeout: float = QUERY_TIMEOUT_SECONDS) -> float:
        """Poll ``expr`` until it returns a sample (the first scrapes take a second or two)
        and return the first sample's value."""
        def first_value() -> float | None:
            result = self.query(expr)
            return float(result[0]["value"][1]) if result else None

        # 0.0 is a real answer, so wrap it to stay truthy for the poller.
        return poll_until(lambda: _Box.of(first_value()), what=f"PromQL {expr!r} has a sample",
                          timeout=timeout, process=self.process).value

    def wait_for_targets_up(self, *, timeout: float = QUERY_TIMEOUT_SECONDS) -> None:
        """Wait until every target has been scraped successfully (``up == 1``)."""
        poll_until(lambda: len(self.query("up == 1")) == len(self.targets),
                   what=f"all {len(self.targets)} targets up", timeout=timeout,
                   process=self.process)

    def stop(self) -> None:
        self.process.stop()


@dataclass(frozen=True)
class _Box:
    value: float

    @classmethod
    def of(cls, value: float | None) -> _Box | None:
        return None if value is None else cls(value)


def start_prometheus(testbin: Testbin, workdir: Path, targets: Sequence[str], *,
                     scrape_interval: str = "1s",
                     timeout: float = START_TIMEOUT_SECONDS) -> PrometheusServer:
    """Start Prometheus scraping ``targets`` every ``scrape_interval``; wait until ready."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(_scrape_config(targets, scrape_interval), sort_keys=False))
    port = free_port()
    process = ServerProcess("prometheus", [
        testbin.path("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address={LOOPBACK}:{port}",
        "--log.level=warn",
    ], workdir / "prometheus.log")
    server = PrometheusServer(f"http://{LOOPBACK}:{port}", list(targets), process)
    try:
        poll_until(lambda: _ready(server.url), what=f"Prometheus /-/ready at {server.url}",
                   timeout=timeout, process=process)
    except BaseException:
        process.stop()
        raise
    return server


def check_metrics(testbin: Testbin, exposition: str) -> list[str]:
    """Lint a metrics exposition with ``promtool check metrics``; return its complaints.

    An empty list means clean. The convention checks (base units, ``_total`` on counters)
    are the ones STYLE.md asks every exporter to pass.
    """
    done = subprocess.run([str(testbin.path("promtool")), "check", "metrics"],
                          input=exposition, capture_output=True, text=True, timeout=30)
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode != 0 and not complaints:
        complaints = [f"promtool exited {done.returncode} without output"]
    return complaints


def _scrape_config(targets: Sequence[str], interval: str) -> dict[str, Any]:
    jobs = []
    for i, target in enumerate(targets):
        parsed = urllib.parse.urlsplit(target if "://" in target else f"http://{target}")
        if not parsed.netloc:
            raise PlaneError(f"Prometheus target {target!r}: expected host:port or a URL")
        jobs.append({
            "job_name": f"target-{i}",
            "scheme": parsed.scheme,
            "metrics_path": parsed.path or "/metrics",
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "static_configs": [{"targets": [parsed.netloc]}],
        })
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": jobs}


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except urllib.error.HTTPError as e:  # 503 while the TSDB opens
        e.close()
        return False
