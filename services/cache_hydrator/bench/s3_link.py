"""A remote object store's link in front of the loopback S3 server, for read benchmarks.

The test S3 server (versitygw) runs on this machine's loopback and serves its files from
the page cache: 1–2 GB/s and well under a millisecond a request, which no bucket across a
network gives. Toxiproxy (Shopify's TCP proxy, MIT; built from the Go module proxy into
``~/.cache/alnair/bench/`` the first time, or ``$ALNAIR_TOXIPROXY``) sits between the
readers and the server and gives every connection a remote store's link: a fixed latency
on each response and a bandwidth per connection. AWS's S3 performance guidelines give the
yardsticks: about 85–90 MB/s a connection ("make one concurrent request for each 85–90 MB/s
of desired network throughput") and first-byte latencies of 100–200 ms; the defaults here
(20 ms, 90 MB/s) are kinder to S3 than that.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from alnair_common.natsd import free_port

VERSION = "v2.12.0"
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"


def toxiproxy() -> Path:
    """The toxiproxy server binary: $ALNAIR_TOXIPROXY, else built once into the cache."""
    if os.environ.get("ALNAIR_TOXIPROXY"):
        return Path(os.environ["ALNAIR_TOXIPROXY"])
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    target = home / "alnair" / "bench" / f"toxiproxy-{VERSION}" / "server"
    if not target.exists():
        if shutil.which("go") is None:
            raise RuntimeError("building toxiproxy needs Go (or set ALNAIR_TOXIPROXY to its server binary)")
        with tempfile.TemporaryDirectory() as gobin:
            subprocess.run(["go", "install", f"{MODULE}@{VERSION}"], check=True,
                           env={**os.environ, "GOBIN": gobin, "CGO_ENABLED": "0"})
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(Path(gobin) / "server", target)
    return target


@dataclass
class Link:
    """A running proxy: ``url`` reaches the upstream S3 server through the link."""

    process: subprocess.Popen[bytes]
    url: str
    latency_ms: int
    mbps: int

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def _api(port: int, path: str, body: dict) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def start_link(upstream_url: str, latency_ms: int, mbps: int) -> Link:
    """Toxiproxy in front of ``upstream_url`` (http://host:port): each response
    ``latency_ms`` late, each connection at most ``mbps`` MB/s (10^6 bytes) towards the reader."""
    api_port, port = free_port(), free_port()
    process = subprocess.Popen([str(toxiproxy()), "-host", "127.0.0.1", "-port", str(api_port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", api_port), 1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("toxiproxy did not start") from None
            time.sleep(0.1)
    upstream = urlsplit(upstream_url)
    _api(api_port, "/proxies", {"name": "s3", "listen": f"127.0.0.1:{port}",
                                "upstream": f"{upstream.hostname}:{upstream.port}", "enabled": True})
    _api(api_port, "/proxies/s3/toxics", {"name": "latency", "type": "latency", "stream": "downstream",
                                          "attributes": {"latency": latency_ms, "jitter": 0}})
    _api(api_port, "/proxies/s3/toxics", {"name": "bandwidth", "type": "bandwidth",
                                          "stream": "downstream", "attributes": {"rate": mbps * 1000}})
    return Link(process, f"http://127.0.0.1:{port}", latency_ms, mbps)
