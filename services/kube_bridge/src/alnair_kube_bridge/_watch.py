"""A list-then-watch loop that never loses an event and survives an expired resourceVersion.

The official client's ``Watch.stream`` retries a 410 only once and drops the bookmark
handling on raw objects, so the loop is written out here over the generated list calls:

* list → a ``Synced`` batch (every object that exists now) and the list's resourceVersion;
* watch from that resourceVersion; every event (and every bookmark) advances it, and a watch
  that ends (server timeout, dropped connection) resumes from it, so nothing is skipped;
* 410 Gone (the version was compacted away) → list again: the new ``Synced`` batch lets the
  consumer see what changed and what disappeared while it was not watching.

The loop runs in a thread (the client is synchronous) and hands events to ``sink``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3.exceptions
from kubernetes.client.rest import ApiException

from alnair_common import get_logger

log = get_logger("alnair.kube-bridge.watch")
Obj = dict[str, Any]
ListCall = Callable[..., Any]


@dataclass(frozen=True)
class Synced:
    """Every object that exists at ``resource_version`` (after a list)."""

    kind: str
    items: list[Obj]
    resource_version: str


@dataclass(frozen=True)
class Changed:
    """One watch event: ``type`` is ADDED, MODIFIED or DELETED."""

    kind: str
    type: str
    obj: Obj


class Gone(Exception):
    """The watched resourceVersion is too old (HTTP 410): relist."""


class ResourceWatch:
    """Lists and watches one kind of object until :meth:`stop`."""

    def __init__(self, kind: str, list_call: ListCall, sink: Callable[[Synced | Changed], None],
                 *, watch_timeout_seconds: int = 30, backoff_max_seconds: float = 5.0) -> None:
        self.kind = kind
        self.list_call = list_call
        self.sink = sink
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.resource_version: str | None = None
        self.relists = 0
        self._stop = threading.Event()
        self._response: Any = None

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:  # unblock a read that waits for the next event
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001 - best effort; the server timeout ends it anyway
                pass

    def run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
                backoff = 0.2
            except Gone:
                log.info("resourceVersion expired; relisting", kind=self.kind,
                         resource_version=self.resource_version)
                self.resource_version = None
            except ApiException as e:
                if e.status == 410:
                    self.resource_version = None
                    continue
                log.warning("watch failed; retrying", kind=self.kind, status=e.status,
                            reason=e.reason, retry_in=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max_seconds)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
                if self._stop.is_set():
                    break
                log.warning("watch connection lost; resuming", kind=self.kind, error=repr(e),
                            resource_version=self.resource_version, retry_in=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max_seconds)

    def _list(self) -> None:
        response = self.list_call(_preload_content=False)
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        self.relists += 1
        version = body["metadata"]["resourceVersion"]
        self.sink(Synced(self.kind, list(body.get("items") or []), version))
        self.resource_version = version

    def _watch(self) -> None:
        response = self.list_call(
            watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_seconds, _preload_content=False)
        self._response = response
        try:
            for line in response:
                if self._stop.is_set():
                    return
                for part in line.splitlines():
                    if part.strip():
                        self._event(json.loads(part))
        finally:
            self._response = None
            response.release_conn()

    def _event(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message", ""))
            raise ApiException(status=obj.get("code"), reason=obj.get("message"))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            self.sink(Changed(self.kind, str(kind), obj))
        if version:
            self.resource_version = version
