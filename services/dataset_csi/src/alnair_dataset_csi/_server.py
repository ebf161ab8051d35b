"""The gRPC server on the kubelet's plugin socket."""

from __future__ import annotations

import os
import signal
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

from alnair_common import get_logger
from alnair_kubelet.api import csi_grpc

from ._node import DatasetIdentity, DatasetNode
from ._settings import DatasetCsiSettings

log = get_logger("alnair.dataset-csi")


def start(settings: DatasetCsiSettings) -> grpc.Server:
    """Serve Identity and Node on the settings' socket (a stale socket file is replaced)."""
    path = settings.socket_path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="csi"))
    csi_grpc.add_IdentityServicer_to_server(DatasetIdentity(), server)
    csi_grpc.add_NodeServicer_to_server(DatasetNode(settings), server)
    server.add_insecure_port(settings.csi_endpoint)
    server.start()
    return server


def health(settings: DatasetCsiSettings) -> ThreadingHTTPServer:
    """``/healthz`` and ``/readyz`` on the health port, 200 while the plugin's socket is there
    (the kubelet's only way in); a thread of its own."""
    socket_path = settings.socket_path

    class Probe(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            ok = self.path in ("/healthz", "/readyz") and os.path.exists(socket_path)
            self.send_response(200 if ok else (503 if self.path in ("/healthz", "/readyz") else 404))
            self.end_headers()
            self.wfile.write(b"ok\n" if ok else b"not serving\n")

        def log_message(self, *_args: object) -> None:
            return None

    server = ThreadingHTTPServer((settings.health_host, settings.health_port), Probe)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def serve(settings: DatasetCsiSettings) -> None:
    """Serve until SIGTERM or SIGINT. The mounts are processes of their own and stay."""
    server = start(settings)
    probes = health(settings)
    log.info("serving", endpoint=settings.csi_endpoint, node=settings.node_name,
             tier=settings.pod_tier_url or "(none)", health_port=probes.server_address[1])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    probes.shutdown()
    probes.server_close()
    server.stop(grace=5).wait()
    log.info("stopped")
