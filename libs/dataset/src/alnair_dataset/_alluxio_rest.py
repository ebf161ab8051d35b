"""The Alluxio 2.9 proxy's REST API (``/api/v1/paths/...`` and ``/api/v1/streams/...``).

Why this API: it is what the open-source 2.9 proxy serves and what reaches the master's
namespace semantics the tier relies on: ``create-file`` fails if the file exists, and
``rename`` fails if the destination exists, atomically in the master. The proxy's S3 API
has neither (a PUT overwrites; there is no rename). Its GetObject is one call where a REST
read is three (open-file, read, close), yet measured on loopback only 15–38 % faster
(docs/benchmarks.md, "Alluxio tier": the proxy's hops to master and worker dominate), not
enough to speak two APIs or to make boto3 a dependency of every reader.

Why no Alluxio client library: ``alluxio-python-library`` (and ``alluxio`` 1.0.0, which PyPI
describes word for word alike) speaks only the worker HTTP API of Alluxio 3.x, which is not
open source and which 2.9 does not have. The older ``alluxio`` 0.1.x (Alluxio/alluxio-py,
written for Python 2.7) wraps this same REST API with ``requests``; the tier needs a
dozen of its calls, so it makes them itself with a ``requests`` session per thread, which
keeps connections alive.

The proxy must run with ``alluxio.proxy.s3.v2.version.enabled=false``: 2.9's second S3
servlet otherwise takes every path under ``/api/v1`` and this API answers empty 200s.

Errors: the proxy answers 500 with ``{"statusCode": ..., "message": ...}``; NOT_FOUND and
ALREADY_EXISTS become :class:`NotFound` and :class:`Exists` (the tier's control flow), a
read of a file not yet closed :class:`Incomplete`, everything else, and any connection
failure, :class:`~alnair_dataset.TierUnavailableError`.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import quote

from ._errors import InvalidSpecError, TierUnavailableError

WRITE_TYPES = ("MUST_CACHE", "CACHE_THROUGH", "THROUGH", "ASYNC_THROUGH")
# Metadata calls never consult the under-storage: the tier's files live in Alluxio only.
_NO_UFS = {"loadMetadataType": "NEVER"}
# Calls whose success always has a body (a stream id, JSON); an empty 200 is 2.9's S3 v2
# servlet answering in the REST API's place.
_ANSWERING = ("create-file", "open-file", "get-status", "exists", "list-status")
# How long a written file may take to be completed after its stream was closed (see write_new).
COMPLETE_SECONDS = 10.0


class NotFound(Exception):
    pass


class Exists(Exception):
    pass


class Incomplete(Exception):
    """The file is there but its writer has not closed it (yet, or ever: it died)."""


def _requests() -> Any:
    try:
        import requests
    except ImportError as e:  # an optional dependency: Redis-only images need not have it
        raise InvalidSpecError("the Alluxio tier needs the requests package: "
                               "pip install 'alnair-dataset[alluxio]'") from e
    return requests


class AlluxioRest:
    """Calls on one proxy; safe to share between threads (a session per thread)."""

    def __init__(self, host: str, port: int, *, timeout: float = 2.0,
                 write_type: str = "MUST_CACHE") -> None:
        self._http = _requests()
        self.where = f"{host}:{port}"
        self.base = f"http://{host}:{port}/api/v1"
        # Connecting fails fast (a dead proxy); a read may take longer on a loaded proxy.
        self.timeout = (timeout, max(5 * timeout, 10.0))
        self.write_type = write_type
        self._local = threading.local()
        self._sessions: list[Any] = []
        self._lock = threading.Lock()

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self._http.Session()
            with self._lock:
                self._sessions.append(session)
        return session

    def _post(self, url: str, what: str, *, options: dict | None = None,
              data: bytes | None = None, params: dict | None = None) -> Any:
        try:
            if data is not None:
                r = self._session().post(url, data=data, params=params, timeout=self.timeout,
                                         headers={"Content-Type": "application/octet-stream"})
            elif options is not None:
                r = self._session().post(url, json=options, params=params, timeout=self.timeout)
            else:
                r = self._session().post(url, params=params, timeout=self.timeout)
        except self._http.RequestException as e:
            raise TierUnavailableError(f"Alluxio proxy at {self.where}: {what} failed: "
                                       f"{type(e).__name__}: {e}") from e
        if r.status_code == 200:
            return r
        try:
            body = r.json()
            status, message = body.get("statusCode", ""), body.get("message", "")
        except ValueError:
            status, message = "", r.text[:300]
        if status == "NOT_FOUND" or "no ufs status is present" in message:
            # the latter: a file opened while another writer deleted it to put its own in place
            raise NotFound(message)
        if status == "ALREADY_EXISTS":
            raise Exists(message)
        if "is incomplete" in message:
            raise Incomplete(message)
        raise TierUnavailableError(f"Alluxio proxy at {self.where}: {what} failed: HTTP "
                                   f"{r.status_code} {status or ''} {message}".rstrip())

    def call(self, path: str, op: str, options: dict | None = None, **params: str) -> Any:
        """``POST /paths/<path>/<op>`` with JSON ``options``; the response."""
        r = self._post(f"{self.base}/paths/{quote(path)}/{op}", f"{op} {path}",
                       options=options if options is not None else {}, params=params or None)
        if op in _ANSWERING and not r.content:
            raise TierUnavailableError(
                f"Alluxio proxy at {self.where}: {op} answered nothing, so its REST paths API is "
                "off: set alluxio.proxy.s3.v2.version.enabled=false in the proxy's "
                "alluxio-site.properties and restart it")
        return r

    # -- files ------------------------------------------------------------------------------

    def write_new(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        """Create ``path`` (and its parents) holding ``data``; Exists if it is there."""
        options = {"recursive": True, "writeType": self.write_type}
        if overwrite:
            options["overwrite"] = True
        stream = int(self.call(path, "create-file", options).text)
        streams = f"{self.base}/streams/{stream}"
        try:
            if data:
                self._post(f"{streams}/write", f"writing {path}", data=data)
        finally:
            self._post(f"{streams}/close", f"closing {path}")
        self._until_complete(path)

    def _until_complete(self, path: str) -> None:
        """Return once the master has completed ``path``.

        The 2.9 proxy answers a stream's close at once but closes the stream in a removal
        listener of its stream cache, which may run only at a later cache operation (seen in
        CI: the completion ran after the tier had renamed the file, failed on the old name,
        and left the renamed file incomplete for good). So the tier waits for completion
        before it renames, and nudges the cache meanwhile with a stream of its own (opening
        one runs the pending closes)."""
        deadline = time.monotonic() + COMPLETE_SECONDS
        while not self.status(path).get("completed", True):
            if time.monotonic() > deadline:
                raise TierUnavailableError(f"Alluxio proxy at {self.where}: {path} was not "
                                           f"completed within {COMPLETE_SECONDS:.0f} s of its close")
            nudge = f"{path.rsplit('/', 1)[0]}/+nudge+{threading.get_ident()}"
            stream = int(self.call(nudge, "create-file", {"recursive": True, "overwrite": True,
                                                          "writeType": self.write_type}).text)
            self._post(f"{self.base}/streams/{stream}/close", f"closing {nudge}")
            time.sleep(0.01)

    def mkdirs(self, path: str) -> None:
        """Make directory ``path`` and its parents; nothing if it exists (one call)."""
        self.call(path, "create-directory", {"recursive": True, "allowExists": True,
                                             "writeType": self.write_type})

    def read(self, path: str) -> bytes:
        """The bytes of ``path``; NotFound if absent, Incomplete if not closed.

        A failed read is made once more, opening whatever stands at ``path`` then: CI saw a
        read stall past the 10 s timeout while two writers replaced the file (a replaced
        file's stream read in a direct test answers at once, so the cause is the loaded
        proxy's, not understood); a dead proxy still fails (its ``exists`` cannot connect)."""
        try:
            return self._read_once(path)
        except TierUnavailableError:
            if not self.exists(path):
                raise NotFound(path) from None
            return self._read_once(path)

    def _read_once(self, path: str) -> bytes:
        stream = int(self.call(path, "open-file").text)
        streams = f"{self.base}/streams/{stream}"
        try:
            return self._post(f"{streams}/read", f"reading {path}").content
        finally:
            self._post(f"{streams}/close", f"closing {path}")

    def status(self, path: str) -> dict:
        return self.call(path, "get-status", _NO_UFS).json()

    def exists(self, path: str) -> bool:
        return bool(self.call(path, "exists", _NO_UFS).json())

    def list(self, path: str) -> list[dict]:
        """The entries of directory ``path`` (name, length, lastModificationTimeMs...);
        an absent directory lists nothing."""
        try:
            return self.call(path, "list-status", _NO_UFS).json()
        except NotFound:
            return []

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``; Exists if ``dst`` is there, NotFound if ``src`` is not."""
        self.call(src, "rename", dst=dst)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete ``path``; False if it was absent or is a directory that is not empty."""
        try:
            self.call(path, "delete", {"recursive": recursive})
        except NotFound:
            return False
        except TierUnavailableError as e:
            if "FAILED_PRECONDITION" in str(e):  # a directory someone just wrote into
                return False
            raise
        return True

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
