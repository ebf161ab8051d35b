"""The exporter's ``/metrics`` endpoint: Prometheus text format from its collectors, fast.

With 8 GPUs x 64 pods the exposition has thousands of series, and prometheus-client's
generic formatter spends ~10 µs on each (label-name validation and escaping on every
scrape), over the 20 ms a scrape may take. The collectors stay ordinary prometheus-client
collectors; this renderer formats their gauge and counter families itself and keeps each
label block it escaped until a scrape no longer uses it, so a steady set of pods costs one
string concatenation per series. Anything else (the process-wide registry with the bus
client's counters) is appended by prometheus-client's own formatter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from aiohttp import web
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from alnair_common.health import serve


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class ExpositionRenderer:
    """Formats gauge and counter families in the text format 0.0.4 (what promtool checks)."""

    def __init__(self) -> None:
        self._blocks: dict[tuple[tuple[str, str], ...], str] = {}

    def _block(self, sample: Sample, used: dict[tuple[tuple[str, str], ...], str]) -> str:
        key = tuple(sample.labels.items())
        block = used.get(key) or self._blocks.get(key)
        if block is None:
            pairs = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(sample.labels.items()))
            block = "{" + pairs + "}" if pairs else ""
        used[key] = block
        return block

    def render(self, collectors: Iterable[Collector]) -> str:
        out: list[str] = []
        used: dict[tuple[tuple[str, str], ...], str] = {}
        for collector in collectors:
            for family in collector.collect():
                if family.type not in ("gauge", "counter"):
                    raise ValueError(f"{family.name}: the fast renderer formats gauges and counters, "
                                     f"not {family.type}; expose it through the process registry")
                name = family.name + "_total" if family.type == "counter" else family.name
                doc = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
                out.append(f"# HELP {name} {doc}\n# TYPE {name} {family.type}\n")
                out.extend(f"{s.name}{self._block(s, used)} {_number(s.value)}\n" for s in family.samples)
        self._blocks = used  # label sets no scrape uses any more are dropped here
        return "".join(out)


class MetricsServer:
    """aiohttp server for ``/metrics``; port 0 picks a free one (tests)."""

    def __init__(self, collectors: list[Collector], host: str, port: int, process_registry: Collector = REGISTRY
                 ) -> None:
        self.collectors = collectors
        self.host = host
        self.port = port
        self.process_registry = process_registry
        self.renderer = ExpositionRenderer()
        self._runner: web.AppRunner | None = None

    def render(self) -> bytes:
        return self.renderer.render(self.collectors).encode() + generate_latest(self.process_registry)

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner, self.port = await serve(app, self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})
