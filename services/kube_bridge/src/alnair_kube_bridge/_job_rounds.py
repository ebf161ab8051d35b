"""Rendezvous rounds of training jobs, from their rendezvous pods to the controller.

The c10d host writes each closed round into a file of its pod, which kube-bridge cannot
read; the pod's second container prints that file (``_job_objects.ROUNDS_FOLLOWER``), so the
rounds are the pod's log, which kube-bridge can (``pods/log``). Every ``every_seconds`` the
running rendezvous pods are listed by label, each one's log read, and each round not yet
relayed published on ``alnair.job.<name>.rendezvous`` with its rendezvous id, its members
mapped from torchrun's node address to the worker's pod uid: a worker's address is its FQDN,
``<pod>.<job>-workers.<namespace>.svc...`` (its hostname is its pod name), so the pod name is
its first label. Nothing is kept but the last round relayed per rendezvous: a restarted
bridge relays the rounds again under the same message ids, and the controller drops rounds
it has heard (``round <= heard``). A round whose member pod is gone is skipped once a later
round exists (it was superseded), else waited for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from kubernetes import client as k8s

from alnair.v1 import job_pb2
from alnair_common import Bus, get_logger, subjects
from alnair_lifecycle import RENDEZVOUS_LABEL

from ._job_objects import GANG_LABEL, ROUNDS_CONTAINER
from ._job_workers import job_selector
from ._kube_client import list_pods
from ._kube_errors import response_json

log = get_logger("alnair.kube-bridge.rounds")
Obj = dict[str, Any]
LogReader = Callable[[str, str, str], str]  # (namespace, pod, container) → the log
SOURCE = "kube-bridge"


def rounds_in(text: str) -> Iterator[tuple[int, list[list[Any]]]]:
    """(round, members) of each whole line of a rounds log; other lines are skipped."""
    for line in text.splitlines():
        try:
            r = json.loads(line)
            yield int(r["round"]), list(r["members"])
        except (ValueError, KeyError, TypeError):
            continue


async def every(seconds: float, once: Callable[[], Awaitable[object]], failed: str) -> None:
    """``once()`` every ``seconds``, for ever; a failure is logged (``failed``) and the next
    tick tries again. The relays of rounds and steps poll this way."""
    while True:
        try:
            await once()
        except Exception as e:  # noqa: BLE001 - the next tick tries again
            log.info(failed, error=str(e))
        await asyncio.sleep(seconds)


class RoundsRelay:
    """``read_log`` is the seam for tests (kwok runs no containers, so pods have no logs)."""

    def __init__(self, bus: Bus, api_client: k8s.ApiClient, *, namespace: str = "",
                 every_seconds: float = 1.0, read_log: LogReader | None = None) -> None:
        self.bus = bus
        self.core = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.every_seconds = every_seconds
        self.read_log = read_log or self._read_log
        self.relayed: dict[str, int] = {}  # rendezvous id → last round published

    async def run(self) -> None:
        await every(self.every_seconds, self.relay_once, "rendezvous rounds not relayed this time")

    async def relay_once(self) -> int:
        """Publish what the running rendezvous pods closed since the last time; the count."""
        hosts = await asyncio.to_thread(self._hosts)
        present, published = set(), 0
        for pod in hosts:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            name, rid = labels.get(GANG_LABEL, ""), labels.get(RENDEZVOUS_LABEL, "")
            present.add(rid)
            if not name or not rid or (pod.get("status") or {}).get("phase") != "Running":
                continue
            try:
                text = await asyncio.to_thread(self.read_log, meta["namespace"], meta["name"],
                                               ROUNDS_CONTAINER)
            except Exception as e:  # noqa: BLE001 - one pod's log must not stop the others
                log.info("rendezvous log unreadable", pod=meta["name"], error=str(e))
                continue
            published += await self._relay(name, meta["namespace"], rid, list(rounds_in(text)))
        for rid in set(self.relayed) - present:
            del self.relayed[rid]
        return published

    async def _relay(self, name: str, namespace: str, rid: str,
                     rounds: list[tuple[int, list[list[Any]]]]) -> int:
        done = self.relayed.get(rid, 0)
        new = sorted((n, m) for n, m in rounds if n > done)
        if not new:
            return 0
        uids = await asyncio.to_thread(self._worker_uids, name, namespace)
        published = 0
        for i, (number, members) in enumerate(new):
            found = [uids.get(str(m[0]).split(".")[0]) for m in members if m]
            if None in found or not found:
                if i == len(new) - 1:
                    break  # the newest round: its member pod may not be listed yet
                self.relayed[rid] = number  # superseded by a later round
                continue
            r = job_pb2.RendezvousRound(name=name, namespace=namespace, round=number,
                                        members=sorted(u for u in found if u), source=SOURCE,
                                        rendezvous_id=rid)
            r.observed_at.GetCurrentTime()
            await self.bus.publish(subjects.job_rendezvous(name), r,
                                   msg_id=f"rdzv.{namespace}.{name}.{rid}.{number}")
            log.info("rendezvous round relayed", job=f"{namespace}/{name}", rendezvous=rid,
                     round=number, world=len(found))
            self.relayed[rid] = number
            published += 1
        return published

    # -- API reads (in a thread) ---------------------------------------------------------------

    def _hosts(self) -> list[Obj]:
        selector = f"{GANG_LABEL},{RENDEZVOUS_LABEL}"
        response = list_pods(self.core, self.namespace, label_selector=selector, _preload_content=False)
        return list(response_json(response).get("items") or [])

    def _worker_uids(self, name: str, namespace: str) -> dict[str, str]:
        response = self.core.list_namespaced_pod(namespace, label_selector=job_selector(name, namespace),
                                                 _preload_content=False)
        items = response_json(response).get("items") or []
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}

    def _read_log(self, namespace: str, pod: str, container: str) -> str:
        return read_log(self.core, namespace, pod, container)


def read_log(core: k8s.CoreV1Api, namespace: str, pod: str, container: str, *,
             tail_lines: int | None = None) -> str:
    """A container's log (its last ``tail_lines`` lines, else up to 1 MiB), as text."""
    # Raw: the client would parse a one-line log as JSON and hand back its repr.
    extra = {"tail_lines": tail_lines} if tail_lines else {"limit_bytes": 1 << 20}
    response = core.read_namespaced_pod_log(pod, namespace, container=container,
                                            _preload_content=False, **extra)
    try:
        return bytes(response.data).decode(errors="replace")
    finally:
        response.release_conn()
