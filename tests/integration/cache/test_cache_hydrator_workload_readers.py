"""A data set that a live pod names is not evicted, though the pod's read-only tier user
writes no lease: the hydrator reads the adapters' workload_states bucket (real nats-server
with JetStream, real redis-server)."""

from __future__ import annotations

from cache_support import MIB, write_dataset
from hydrator_support import PHASE, add, running, settings, settled, spec, status

from alnair.v1 import common_pb2, workload_pb2
from alnair_common import TypedKV
from alnair_common.annotations import DATASET
from alnair_common.testing import wait_for


def pod_state(uid: str, phase: int, datasets: str) -> workload_pb2.WorkloadEvent:
    """The last state kube-bridge records for a pod (annotations under ai.centaurus.io/)."""
    return workload_pb2.WorkloadEvent(source="kube-bridge", sequence=1, workload=workload_pb2.Workload(
        ref=common_pb2.WorkloadRef(uid=uid, name="train", namespace="team-a",
                                   mode=common_pb2.MODE_KUBERNETES),
        phase=phase, annotations={DATASET: datasets}))


async def test_a_data_set_a_live_pod_names_is_kept_until_the_pod_ends(
        bus, nats_server, redis_node, tmp_path):
    root = tmp_path / "data"
    for i, name in enumerate("bxde"):
        write_dataset(root / name, files=2, seed=20 + i)
    size = sum(f.stat().st_size for f in (root / "b").rglob("*.bin"))
    url = redis_node().url
    s = settings(nats_server.url, url, tmp_path, cache_allowed_roots=str(root),
                 cache_budget_bytes=2 * size + MIB)
    states = await TypedKV.open(bus, "workload_states", workload_pb2.WorkloadEvent)
    await states.put("pod-1", pod_state("pod-1", workload_pb2.WORKLOAD_PHASE_RUNNING, "b, other"))
    await states.put("pod-2", pod_state("pod-2", workload_pb2.WORKLOAD_PHASE_RUNNING, "bad name!"))
    async with running(s) as hydrator:
        async def ready(name):
            st = await settled(bus, f"team-a.{name}", await add(
                bus, spec(name, f"file://{root}/{name}", namespace="team-a")))
            assert st.phase == PHASE.CACHE_PHASE_READY, st.message
            return st

        # The pod was running before the hydrator started: the bucket says so.
        assert hydrator.workload_readers.reading() == {"team-a.b", "team-a.other"}
        await ready("b")
        await ready("x")
        await ready("d")  # no room: b sorts first but a pod reads it, so x goes
        assert (await status(bus, "team-a.x")).phase == PHASE.CACHE_PHASE_EVICTED
        assert (await status(bus, "team-a.b")).phase == PHASE.CACHE_PHASE_READY

        await states.put("pod-1", pod_state("pod-1", workload_pb2.WORKLOAD_PHASE_SUCCEEDED, "b"))

        async def released():
            return hydrator.workload_readers.reading() == set() or None

        await wait_for(released, timeout=10, what="the ended pod's data sets released")
        await ready("e")  # now b may go
        assert (await status(bus, "team-a.b")).phase == PHASE.CACHE_PHASE_EVICTED
        assert (await status(bus, "team-a.d")).phase == PHASE.CACHE_PHASE_READY
