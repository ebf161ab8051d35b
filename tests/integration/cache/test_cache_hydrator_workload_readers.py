"""A data set that a live pod names is not evicted, though the pod's read-only tier user
writes no lease: the hydrator reads the adapters' workload_states bucket (real nats-server
with JetStream, real redis-server) — for a pod that names it in its annotation, and for a
pod in the seed's form, whose hostPath volume is the data set."""

from __future__ import annotations

from cache_support import MIB, write_dataset
from hydrator_support import PHASE, add, running, settings, settled, spec, status

from alnair.v1 import common_pb2, workload_pb2
from alnair_common import TypedKV
from alnair_common.annotations import DATASET, SEED_CACHE_DATASET
from alnair_common.dataset_refs import host_path_name
from alnair_common.testing import wait_for
from alnair_kube_bridge import pod_workload


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


def seed_pod(uid: str, phase: str, host_path: str) -> dict:
    """A pod in the seed's form, as the apiserver gives it to kube-bridge: ``cacheDataset:
    "yes"`` over a hostPath volume, on Alnair's scheduler, no data set named anywhere."""
    return {"metadata": {"uid": uid, "name": "seed-train", "namespace": "team-a",
                         "annotations": {SEED_CACHE_DATASET: "yes"}},
            "spec": {"schedulerName": "alnair-scheduler", "nodeName": "n1",
                     "volumes": [{"name": "train", "hostPath": {"path": host_path}}],
                     "containers": [{"name": "main", "image": "busybox",
                                     "volumeMounts": [{"name": "train", "mountPath": "/data"}]}]},
            "status": {"phase": phase}}


async def test_a_seed_form_pods_hostpath_data_set_is_kept_until_the_pod_ends(
        bus, nats_server, redis_node, tmp_path):
    """The seed's pods name their data sets by hostPath volume; the state kube-bridge records
    for one (``pod_workload``, the bridge's own conversion) names them, so they are shielded
    like the data sets a pod names in its annotation."""
    root = tmp_path / "data"
    for i, name in enumerate(("seed", "x", "y", "z")):
        write_dataset(root / name, files=2, seed=40 + i)
    size = sum(f.stat().st_size for f in (root / "seed").rglob("*.bin"))
    seed_name = host_path_name(str(root / "seed"))
    url = redis_node().url
    s = settings(nats_server.url, url, tmp_path, cache_allowed_roots=str(root),
                 cache_budget_bytes=2 * size + MIB)

    def state(phase: str, wl_phase: int) -> workload_pb2.WorkloadEvent:
        workload = pod_workload(seed_pod("pod-s", phase, str(root / "seed")))
        assert workload.phase == wl_phase
        return workload_pb2.WorkloadEvent(source="kube-bridge", sequence=1, workload=workload)

    states = await TypedKV.open(bus, "workload_states", workload_pb2.WorkloadEvent)
    await states.put("pod-s", state("Running", workload_pb2.WORKLOAD_PHASE_RUNNING))
    async with running(s) as hydrator:
        async def ready(name, source):  # as kube-bridge asks for a seed pod's volume
            st = await settled(bus, f"team-a.{name}", await add(
                bus, spec(name, source, namespace="team-a")))
            assert st.phase == PHASE.CACHE_PHASE_READY, st.message
            return st

        assert hydrator.workload_readers.reading() == {f"team-a.{seed_name}"}
        await ready(seed_name, "file:///" + str(root / "seed").strip("/"))
        await ready("x", f"file://{root}/x")
        await ready("y", f"file://{root}/y")  # no room: the seed's data set sorts first, a pod reads it
        assert (await status(bus, "team-a.x")).phase == PHASE.CACHE_PHASE_EVICTED
        assert (await status(bus, f"team-a.{seed_name}")).phase == PHASE.CACHE_PHASE_READY

        await states.put("pod-s", state("Succeeded", workload_pb2.WORKLOAD_PHASE_SUCCEEDED))

        async def released():
            return hydrator.workload_readers.reading() == set() or None

        await wait_for(released, timeout=10, what="the ended seed pod's data set released")
        await ready("z", f"file://{root}/z")  # now the seed's data set (before y) may go
        assert (await status(bus, f"team-a.{seed_name}")).phase == PHASE.CACHE_PHASE_EVICTED
        assert (await status(bus, "team-a.y")).phase == PHASE.CACHE_PHASE_READY
