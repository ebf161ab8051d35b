"""kube-bridge is safe to run twice, and a bridge killed outright (SIGKILL, mid-stream)
is replaced without a lost or duplicated event."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from kb_support import alnair_pod, phases_by_name, stream_messages, workload_events

from alnair.v1 import common_pb2, platform_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, BusUnavailableError, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.allocations import publish_decision
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes

P = wl.WorkloadPhase
FULL = [P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_BOUND, P.WORKLOAD_PHASE_RUNNING,
        P.WORKLOAD_PHASE_SUCCEEDED, P.WORKLOAD_PHASE_DELETED]


def bind(pod, node: str) -> scheduling_pb2.BindDecision:
    d = scheduling_pb2.BindDecision(workload=common_pb2.WorkloadRef(
        uid=pod.metadata.uid, name=pod.metadata.name, namespace=pod.metadata.namespace,
        mode=common_pb2.MODE_KUBERNETES))
    d.assignment.node, d.assignment.gpu_uuid, d.assignment.compute_percent = node, "GPU-0", 10
    return d


async def test_two_bridges_publish_each_transition_once(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, start_bridge) -> None:
    await start_bridge()
    await start_bridge()
    [node] = kwok_nodes(1)
    names = [f"w{i}" for i in range(4)]
    pods = [kube.core.create_namespaced_pod(kube.namespace, alnair_pod(n)) for n in names]
    for pod in pods:
        await publish_decision(bus, bind(pod, node))
    for name in names:
        await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, name, "Running")
        kwok_nodes.finish(kube.namespace, name)
    for name in names:
        await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, name, "Succeeded")
        kube.core.delete_namespaced_pod(name, kube.namespace, grace_period_seconds=0)

    async def all_deleted():
        got = phases_by_name(await workload_events(bus))
        return got if all(got.get(n, [])[-1:] == [P.WORKLOAD_PHASE_DELETED] for n in names) \
            else None

    got = await wait_for(all_deleted, timeout=40, what="every pod deleted")
    assert got == {n: FULL for n in names}
    results = await _bind_results(bus)
    assert sorted(r.workload.name for r in results) == names and all(r.ok for r in results)


async def _bind_results(bus: Bus) -> list[scheduling_pb2.BindResult]:
    return await stream_messages(bus, "SCHEDULING", subjects.sched_bound(),
                                 scheduling_pb2.BindResult)


async def test_bridge_killed_mid_stream_is_replaced_without_loss_or_duplicates(
        bus: Bus, nats_server: NatsServer, kube: KubeNamespace, tmp_path: Path) -> None:
    env = {**os.environ, "ALNAIR_NATS_URL": nats_server.url,
           "ALNAIR_KUBECONFIG": str(kube.kubeconfig), "ALNAIR_WATCH_NAMESPACE": kube.namespace,
           "ALNAIR_WATCH_TIMEOUT_SECONDS": "5", "ALNAIR_HEALTH_PORT": "0",
           "ALNAIR_DATA_DIR": str(tmp_path), "ALNAIR_LOG_FORMAT": "console"}

    async def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "alnair_kube_bridge"], env=env,  # noqa: ASYNC220
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        async def ready() -> bool:
            assert proc.poll() is None, f"kube-bridge exited {proc.returncode}"
            try:
                report = await bus.request(subjects.health("kube-bridge"),
                                           platform_pb2.StatusRequest(),
                                           platform_pb2.HealthReport, timeout=1)
            except BusUnavailableError:
                return False
            return report.ready and report.instance.endswith(f"-{proc.pid}")

        await wait_for(ready, timeout=30, what="kube-bridge subprocess ready")
        return proc

    names = [f"p{i:02d}" for i in range(24)]
    first = await start()
    try:
        for name in names[:12]:
            kube.core.create_namespaced_pod(kube.namespace, alnair_pod(name))

        async def some_published():
            # p00 must be on the bus before the kill: it is deleted while no bridge watches,
            # and only a pod the bus knew can be reported deleted by the replacement.
            events = await workload_events(bus)
            return len(events) >= 4 and names[0] in phases_by_name(events)

        await wait_for(some_published, timeout=20, what="first events")
        first.kill()  # mid-stream: some of the 12 are published, some are not
        first.wait(10)
        for name in names[12:]:
            kube.core.create_namespaced_pod(kube.namespace, alnair_pod(name))
        kube.core.delete_namespaced_pod(names[0], kube.namespace, grace_period_seconds=0)
        second = await start()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
    try:
        expected = {n: [P.WORKLOAD_PHASE_PENDING] for n in names}
        expected[names[0]] = [P.WORKLOAD_PHASE_PENDING, P.WORKLOAD_PHASE_DELETED]

        async def complete():
            got = phases_by_name(await workload_events(bus))
            return got if all(len(got.get(n, [])) >= len(v) for n, v in expected.items()) \
                else None

        await wait_for(complete, timeout=30, what="every pod's events")
        assert phases_by_name(await workload_events(bus)) == expected
    finally:
        second.terminate()
        second.wait(20)
