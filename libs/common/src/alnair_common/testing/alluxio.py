"""A real Alluxio 2.9 for tests: one master, one worker and one proxy, three JVMs on loopback.

The jars come from Maven Central through ``scripts/testbin`` (``bin/alluxio-java`` runs a
class of them); nothing is installed: the configuration directory, the UFS journal, the
root under-storage and the worker's "ramdisk" (a plain directory: mounting a tmpfs needs
privileges, and the worker only needs a directory) all live in the fixture's tmp dir.

Choices that make the servers start in seconds and behave as the cache tier needs:

* ``journal.type=UFS`` formatted by ``alluxio.cli.Format`` (the embedded Raft journal
  would add a port and an election), ``metastore=HEAP``, and the quiet waits that a
  production master keeps before becoming primary or leaving safe mode cut to 100 ms.
* ``proxy.s3.v2.version.enabled=false``: 2.9's second-generation S3 servlet otherwise
  takes every path under ``/api/v1``, and the proxy's REST paths API
  (``/api/v1/paths/...``), which the Alluxio tier speaks, answers empty 200s.
* Every port free on 127.0.0.1, and every bind host 127.0.0.1.

Readiness is a write through the proxy: it needs the master primary, the worker
registered with space, and the proxy connected; a server that exits meanwhile ends the
wait with its log.

One server serves the session (three JVMs take about 10 s and 600 MB to start); each test
gets its own root directory in the namespace, deleted afterwards: :meth:`AlluxioServer.root`.
A test that kills the tier under a reader gets a proxy of its own on the same master and
worker (:meth:`AlluxioServer.start_proxy`, a few seconds) and kills that.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._plane_errors import ServerStartError
from ._server_process import ServerProcess
from .testbin import Testbin

START_TIMEOUT_SECONDS = 90.0
WORKER_CAPACITY = "1GB"
HEAP = {"master": "384m", "worker": "256m", "proxy": "256m"}
MAIN_CLASS = {"master": "alluxio.master.AlluxioMaster", "worker": "alluxio.worker.AlluxioWorker",
              "proxy": "alluxio.proxy.AlluxioProxy"}

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
# one line (or more) per proxy request otherwise
logger.access.name = alluxio.web.ProxyWebServer
logger.access.level = warn
logger.requests.name = alluxio.proxy.s3.logging
logger.requests.level = warn
"""


@dataclass
class AlluxioServer:
    """A running master + worker + proxy; ``url`` is what the Alluxio tier is given."""

    host: str
    proxy_port: int
    master_port: int
    workdir: Path
    launcher: Path
    processes: dict[str, ServerProcess] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """``alluxio://host:port`` of the proxy, the Alluxio tier's URL."""
        return f"alluxio://{self.host}:{self.proxy_port}"

    @property
    def rest(self) -> str:
        return f"http://{self.host}:{self.proxy_port}/api/v1"

    def root(self, name: str | None = None) -> str:
        """A tier URL whose objects live under a fresh ``/name`` in the namespace."""
        return f"{self.url}/{name or 't-' + secrets.token_hex(4)}"

    def call(self, path: str, op: str, options: dict | None = None) -> bytes:
        """One REST call on ``path`` (absolute in the namespace) with JSON ``options``."""
        return _post(f"{self.rest}/paths/{quote(path)}/{op}", json.dumps(options or {}).encode(),
                     "application/json")

    def remove(self, path: str) -> None:
        """Delete ``path`` and everything under it (a test's root), if it exists."""
        if json.loads(self.call(path, "exists") or b"false"):
            self.call(path, "delete", {"recursive": True})

    def start_proxy(self, name: str, overrides: dict[str, str] | None = None, *,
                    timeout: float = START_TIMEOUT_SECONDS) -> AlluxioServer:
        """One more proxy on this master and worker, on a port of its own (a test may kill it
        without harming the session's): the returned server's ``processes`` hold only it.
        ``overrides``: properties for it alone; a proxy given any is waited for only until
        its port answers (they may well break writes)."""
        port = free_port()
        properties = [f"-D{k}={v}" for k, v in (overrides or {}).items()]
        process = ServerProcess(f"alluxio-proxy-{name}", _java_argv(
            self.launcher, self.workdir, "proxy", MAIN_CLASS["proxy"],
            f"-Dalluxio.proxy.web.port={port}", *properties),
            self.workdir / "logs" / f"proxy-{name}.out")
        proxy = AlluxioServer(self.host, port, self.master_port, self.workdir, self.launcher,
                              {"proxy": process})
        ready = (lambda: _listens(proxy)) if overrides else (
            lambda: _writes(proxy, f"/.alnair-fixture-ready-{name}"))
        try:
            poll_until(ready, what=f"Alluxio proxy {name} on port {port}", timeout=timeout)
        except BaseException:
            process.stop()
            raise
        return proxy

    def kill(self) -> None:
        """SIGKILL of each group, no shutdown hooks: gone as a crashed pod is."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.stop(grace_seconds=5.0)  # reaps it

    def stop(self) -> None:
        """Stop the three JVMs at once (each takes seconds to run its shutdown hooks)."""
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(lambda p: p.stop(), self.processes.values()))


class AlluxioCallError(OSError):
    """A REST call on the proxy answered an error (an OSError: waits retry it)."""


def site_properties(workdir: Path, ports: dict[str, int], capacity: str) -> dict[str, str]:
    """The alluxio-site.properties of a loopback cluster rooted in ``workdir``."""
    ram = workdir / "ramdisk"
    return {
        "alluxio.work.dir": str(workdir / "work"),
        "alluxio.tmp.dirs": str(workdir / "tmp"),
        "alluxio.master.hostname": LOOPBACK,
        "alluxio.master.bind.host": LOOPBACK,
        "alluxio.master.rpc.port": str(ports["master_rpc"]),
        "alluxio.master.web.bind.host": LOOPBACK,
        "alluxio.master.web.port": str(ports["master_web"]),
        "alluxio.master.journal.type": "UFS",
        "alluxio.master.journal.folder": str(workdir / "journal"),
        "alluxio.master.journal.tailer.shutdown.quiet.wait.time": "100ms",
        "alluxio.master.worker.connect.wait.time": "100ms",
        "alluxio.master.metastore": "HEAP",
        "alluxio.master.mount.table.root.ufs": str(workdir / "ufs"),
        "alluxio.job.master.hostname": LOOPBACK,
        "alluxio.job.master.rpc.port": str(ports["job_rpc"]),
        "alluxio.job.master.web.port": str(ports["job_web"]),
        "alluxio.worker.hostname": LOOPBACK,
        "alluxio.worker.bind.host": LOOPBACK,
        "alluxio.worker.rpc.port": str(ports["worker_rpc"]),
        "alluxio.worker.web.bind.host": LOOPBACK,
        "alluxio.worker.web.port": str(ports["worker_web"]),
        "alluxio.worker.ramdisk.size": capacity,
        "alluxio.worker.tieredstore.levels": "1",
        "alluxio.worker.tieredstore.level0.alias": "MEM",
        "alluxio.worker.tieredstore.level0.dirs.mediumtype": "MEM",
        "alluxio.worker.tieredstore.level0.dirs.path": str(ram),
        "alluxio.worker.tieredstore.level0.dirs.quota": capacity,
        "alluxio.proxy.web.hostname": LOOPBACK,
        "alluxio.proxy.web.bind.host": LOOPBACK,
        "alluxio.proxy.web.port": str(ports["proxy_web"]),
        "alluxio.proxy.s3.v2.version.enabled": "false",
        # Chunks are 1 MiB: a writer reserves one block of worker space up front.
        "alluxio.user.block.size.bytes.default": "8MB",
        "alluxio.user.file.writetype.default": "MUST_CACHE",
        "alluxio.security.authorization.permission.enabled": "false",
        "alluxio.user.metrics.collection.enabled": "false",
    }


def start_alluxio(testbin: Testbin, workdir: Path, *, capacity: str = WORKER_CAPACITY,
                  timeout: float = START_TIMEOUT_SECONDS) -> AlluxioServer:
    """Format a journal, start master, worker and proxy; wait until a write goes through."""
    launcher = testbin.path("alluxio-java")
    for sub in ("conf", "journal", "ufs", "ramdisk", "work", "tmp", "logs"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("master_rpc", "master_web", "job_rpc", "job_web",
                                            "worker_rpc", "worker_web", "proxy_web")}
    conf = workdir / "conf"
    (conf / "alluxio-site.properties").write_text(
        "".join(f"{k}={v}\n" for k, v in site_properties(workdir, ports, capacity).items()))
    (conf / "log4j2.properties").write_text(_LOG4J2)

    argv = functools.partial(_java_argv, launcher, workdir)
    formatted = subprocess.run([str(a) for a in argv("format", "alluxio.cli.Format")] + ["master"],
                               capture_output=True, text=True, timeout=timeout)
    if formatted.returncode != 0:
        raise ServerStartError(f"alluxio: formatting the journal failed ({formatted.returncode}):"
                               f"\n{(formatted.stdout + formatted.stderr)[-3000:]}")
    server = AlluxioServer(LOOPBACK, ports["proxy_web"], ports["master_rpc"], workdir, launcher)
    try:
        for role in ("master", "worker", "proxy"):
            server.processes[role] = ServerProcess(
                f"alluxio-{role}", argv(role, MAIN_CLASS[role]), workdir / "logs" / f"{role}.out")
        probe = "/.alnair-fixture-ready"
        poll_until(lambda: _writes(server, probe), what="a write through the Alluxio proxy",
                   timeout=timeout)
        server.call(probe, "delete")
    except BaseException:
        server.stop()
        raise
    return server


def _java_argv(launcher: Path, workdir: Path, role: str, main: str,
               *properties: str) -> list[str | Path]:
    """A JVM of ``role`` with the cluster's configuration (``-D`` properties override it)."""
    conf = workdir / "conf"
    return [launcher, f"-Xmx{HEAP.get(role, '128m')}", "-XX:+UseSerialGC",
            f"-Dalluxio.home={workdir}", f"-Dalluxio.conf.dir={conf}",
            f"-Dalluxio.logs.dir={workdir / 'logs'}",
            f"-Dlog4j.configurationFile={conf / 'log4j2.properties'}", *properties, main]


def _listens(server: AlluxioServer) -> bool:
    server.processes["proxy"].check_alive()
    with socket.create_connection((server.host, server.proxy_port), timeout=0.5):
        return True


def _writes(server: AlluxioServer, path: str) -> bool:
    """Whether creating, writing and closing a small file through the proxy succeeds. A
    server that exited ends the wait at once with its log (ServerStartError is not retried)."""
    for process in server.processes.values():
        process.check_alive()
    stream = int(server.call(path, "create-file", {"writeType": "MUST_CACHE", "overwrite": True}))
    _post(f"{server.rest}/streams/{stream}/write", b"ready", "application/octet-stream")
    _post(f"{server.rest}/streams/{stream}/close", None, None)
    return True


def _post(url: str, body: bytes | None, content_type: str | None) -> bytes:
    """POST to the proxy; an error status raises AlluxioCallError with the server's message."""
    headers = {"Content-Type": content_type} if content_type else {}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()
    except urllib.error.HTTPError as e:
        raise AlluxioCallError(f"POST {url}: HTTP {e.code}: {e.read()[:300]!r}") from e
