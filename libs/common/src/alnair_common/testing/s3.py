"""A real S3-compatible server for tests: versitygw serving a plain directory.

Why versitygw: it is Apache-2.0 (MinIO and Garage are AGPL), it builds from the Go module
proxy into the test-binary cache like the other Go servers (``scripts/testbin``, about a
minute cold, 45 MB), and its POSIX backend maps buckets to directories and objects to
files, so a test can also see or change the bytes behind an object. SeaweedFS was the other
candidate; the module proxy lists no version of it (its tags are not semver), so it could
only be pinned by a pseudo-version of a commit. moto's server (a Python fake of S3's API)
was the fallback only if neither built.

The fixture needs no S3 library: buckets are made as directories before the server sees
them (versitygw treats every top-level directory as a bucket). Tests talk to it with the
ordinary client (boto3, from the dev dependencies): ``server.client()``.
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._deadline import poll_until
from ._loopback import LOOPBACK, free_port
from ._server_process import ServerProcess
from .testbin import Testbin

START_TIMEOUT_SECONDS = 20.0
REGION = "us-east-1"


@dataclass
class S3Server:
    """A running versitygw; ``endpoint`` and the root keys are what a client needs."""

    host: str
    port: int
    root: Path
    access_key: str
    secret_key: str
    process: ServerProcess
    _client: Any = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def make_bucket(self, name: str | None = None) -> str:
        """A new empty bucket (a directory under the served root); returns its name."""
        name = name or f"b-{secrets.token_hex(4)}"
        (self.root / name).mkdir()
        return name

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``boto3.client("s3", **options)``."""
        return {"endpoint_url": self.endpoint, "aws_access_key_id": self.access_key,
                "aws_secret_access_key": self.secret_key, "region_name": REGION}

    def client(self) -> Any:
        """The boto3 S3 client on this server, one per server, closed with it (a client left
        to the garbage collector fails whatever later test it is collected in, with a
        ResourceWarning for its socket). boto3 is imported here: only tests need it."""
        if self._client is None:
            import boto3  # here, not at the top: users of the harness that need no S3 lack it

            self._client = boto3.client("s3", **self.client_options())
        return self._client

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self.process.stop()


def start_s3(testbin: Testbin, workdir: Path, *,
             timeout: float = START_TIMEOUT_SECONDS) -> S3Server:
    """Start versitygw on a free loopback port over ``workdir/root``; wait until it listens."""
    root = workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    (workdir / "meta").mkdir(exist_ok=True)
    port = free_port()
    access, secret = "alnair-test", secrets.token_hex(16)
    process = ServerProcess("versitygw", [
        testbin.path("versitygw"),
        "--port", f"{LOOPBACK}:{port}",
        "--access", access,
        "--secret", secret,
        "--region", REGION,
        "--quiet",
        # Objects' metadata (ETag, content type) lives in extended attributes; a sidecar
        # directory keeps it where tmpfs or overlay file systems do not support them.
        "posix", "--sidecar", str(workdir / "meta"), str(root),
    ], workdir / "versitygw.log")
    server = S3Server(LOOPBACK, port, root, access, secret, process)
    try:
        poll_until(lambda: _listens(LOOPBACK, port), what=f"versitygw on port {port}",
                   timeout=timeout, process=process)
    except BaseException:
        process.stop()
        raise
    return server


def _listens(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0
