"""Training steps of jobs on Kubernetes, from their worker pods to the controller.

A worker's script may write ``<step> <seconds>`` to ``$ALNAIR_PROGRESS_FILE`` each step (as
in local mode); the worker pod's sidecar prints each new content (``_job_objects``), so the
newest step is the last line of that sidecar's log, which kube-bridge can read. Every
``every_seconds`` the running workers of every job are listed by label and, per job, the
progress logs of its ``per_job`` oldest running workers are read (every rank writes the same
step; two cover a worker that just started or is about to end); the newest step is published
on ``alnair.job.<name>.step`` if it is newer than the last one published for the job. As in
local mode that subject is core NATS: a lost report is replaced by the next one, and the
controller ignores steps that are not newer. Nothing is kept but the last step per job.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from kubernetes import client as k8s

from alnair.v1 import job_pb2
from alnair_common import Bus, get_logger, subjects
from alnair_lifecycle import JOB_LABEL, JOB_NAMESPACE_LABEL

from ._job_objects import MANAGED_SELECTOR, PROGRESS_CONTAINER
from ._job_rounds import LogReader, every
from ._job_rounds import read_log as read_log_of
from ._kube_client import list_pods
from ._kube_errors import response_json

log = get_logger("alnair.kube-bridge.steps")
Obj = dict[str, Any]


def newest_step(text: str) -> tuple[int, float] | None:
    """(step, seconds) of the last well-formed line of a progress log."""
    for line in reversed(text.splitlines()):
        try:
            step, seconds = line.split()[:2]
            found = int(step), float(seconds)
        except ValueError:
            continue
        if found[0] >= 0 and found[1] > 0:
            return found
    return None


class StepsRelay:
    """``read_log`` is the seam for tests (kwok runs no containers, so pods have no logs)."""

    def __init__(self, bus: Bus, api_client: k8s.ApiClient, *, namespace: str = "",
                 every_seconds: float = 1.0, per_job: int = 2,
                 read_log: LogReader | None = None) -> None:
        self.bus = bus
        self.core = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.every_seconds = every_seconds
        self.per_job = per_job
        self.read_log = read_log or partial(read_log_of, self.core, tail_lines=5)
        self.published: dict[tuple[str, str], int] = {}  # (namespace, job) → last step sent

    async def run(self) -> None:
        await every(self.every_seconds, self.relay_once, "training steps not relayed this time")

    async def relay_once(self) -> int:
        """Publish each job's newest step if it is new; how many were published."""
        jobs: dict[tuple[str, str], list[Obj]] = {}
        for pod in await asyncio.to_thread(self._running_workers):
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            key = (labels.get(JOB_NAMESPACE_LABEL) or meta["namespace"], labels[JOB_LABEL])
            jobs.setdefault(key, []).append(pod)
        published = 0
        for (job_ns, name), pods in jobs.items():
            pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
            best: tuple[int, float] | None = None
            for pod in pods[:self.per_job]:
                meta = pod["metadata"]
                try:
                    text = await asyncio.to_thread(self.read_log, meta["namespace"], meta["name"],
                                                   PROGRESS_CONTAINER)
                except Exception as e:  # noqa: BLE001 - one pod's log must not stop the others
                    log.debug("progress log unreadable", pod=meta["name"], error=str(e))
                    continue
                found = newest_step(text)
                if found is not None and (best is None or found[0] > best[0]):
                    best = found
            if best is None or best[0] <= self.published.get((job_ns, name), -1):
                continue
            report = job_pb2.StepReport(name=name, namespace=job_ns, step=best[0],
                                        step_seconds=best[1])
            report.observed_at.GetCurrentTime()
            await self.bus.publish(subjects.job_step(name), report)
            self.published[(job_ns, name)] = best[0]
            published += 1
        for gone in set(self.published) - set(jobs):
            del self.published[gone]
        return published

    def _running_workers(self) -> list[Obj]:
        response = list_pods(self.core, self.namespace, label_selector=f"{JOB_LABEL},{MANAGED_SELECTOR}",
                             field_selector="status.phase=Running", _preload_content=False)
        return list(response_json(response).get("items") or [])
