"""Dataset objects served by kube-bridge against the real apiserver (the bundle's CRD, the
bridge holding only its RBAC rights), kwok and nats-server, with the real cache hydrator
over a directory tier and file:// sources: bad specs and names refused at admission with the
schema's messages, the immutable fields refused on change; created → one add on the bus →
hydrated → status, conditions and printer columns; read by a running pod → InUse; deleted
while read → deferred with the pod named, removed once the pod ends."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from kb_datasets_support import SPEC, Datasets, conditions, pod_events, reading_pod, wait_event
from kubernetes.client.rest import ApiException

from alnair.v1 import cache_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, TypedKV, subjects
from alnair_common.annotations import DATASET, SEED_CACHE_DATASET
from alnair_common.dataset_refs import host_path_name
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes
from alnair_kube_bridge._dataset_status import binary_bytes, from_cache_status, usage
from alnair_kube_bridge._datasets import FINALIZER

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))
import hydrator_support as hs  # noqa: E402 - the cache tests' harness of the real hydrator


@pytest.fixture
def datasets(kube: KubeNamespace, bus: Bus) -> Datasets:
    return Datasets(kube, bus)


# -- admission ---------------------------------------------------------------------------------

REFUSED = [  # (name, spec, what the apiserver says)
    ("http", {"source": "http://example.com/data"}, "must be s3://bucket[/prefix] or file:///absolute/path"),
    ("relative", {"source": "file://data/imagenet"}, "must be s3://bucket[/prefix] or file:///absolute/path"),
    ("bucket", {"source": "s3://Bad_Bucket/x"}, "the S3 bucket name must be 3 to 63"),
    ("dotdot", {"source": "file:///data/../etc"}, "must not contain '..' path segments"),
    ("no-source", {"pin": True}, "spec.source: Required value"),
    ("empty-pattern", {**SPEC, "include": [""]}, "spec.include[0]: Invalid value"),
    ("long-pattern", {**SPEC, "exclude": ["x" * 257]}, "may not be more than 256 bytes"),
    ("many-patterns", {**SPEC, "include": [f"*.{i}" for i in range(65)]}, "must have at most 64 items"),
    ("replicas", {**SPEC, "replicas": 0}, "should be greater than or equal to 1"),
    ("tier", {**SPEC, "tier": "memcached"}, 'supported values: "redis", "alluxio"'),
    ("Upper", SPEC, "metadata.name must be a DNS-1123 label"),
    ("a.b", SPEC, "metadata.name must be a DNS-1123 label"),
]


def test_bad_specs_and_names_are_refused_with_a_readable_message(datasets: Datasets) -> None:
    for name, spec, says in REFUSED:
        with pytest.raises(ApiException) as refused:
            datasets.create(name, spec, dry_run="All")
        assert refused.value.status == 422, (name, refused.value.body)
        assert says in json.loads(refused.value.body)["message"], (name, refused.value.body)
    for spec in (SPEC, {"source": "s3://training-data"}, {"source": "s3://a.b-c/x/y", "pin": True,
                 "include": ["**/*.jpg"], "exclude": ["tmp/**"], "replicas": 2, "tier": "alluxio"}):
        datasets.create("good", spec, dry_run="All")
    stored = datasets.create("imagenet", SPEC)
    assert (stored["spec"]["pin"], stored["spec"]["replicas"], stored["spec"]["tier"]) == (False, 1, "redis")


def test_what_selects_the_bytes_is_immutable_pin_and_replicas_are_not(datasets: Datasets) -> None:
    datasets.create("imagenet", SPEC)
    for change in ({"source": "file:///data/other"}, {"include": ["*.jpg"]}, {"tier": "alluxio"}):
        with pytest.raises(ApiException) as refused:
            datasets.patch("imagenet", {"spec": change})
        assert refused.value.status == 422, change
        assert "are immutable" in json.loads(refused.value.body)["message"], change
    changed = datasets.patch("imagenet", {"spec": {"pin": True, "replicas": 3}})
    assert (changed["spec"]["pin"], changed["spec"]["replicas"], changed["metadata"]["generation"]) == (True, 3, 2)


# -- with the real cache hydrator ----------------------------------------------------------------


def write_files(root: Path, files: dict[str, int]) -> int:
    for rel, size in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((bytes(range(251)) * (size // 251 + 1))[:size])
    return sum(files.values())


@pytest.fixture
async def hydrator(nats_server: NatsServer, tmp_path: Path,
                   request: pytest.FixtureRequest) -> AsyncIterator[Path]:
    """The real cache hydrator over a directory tier; file:// sources under the yielded root.
    Parametrize it indirectly with more of its settings."""
    data = tmp_path / "data"
    data.mkdir()
    s = hs.settings(nats_server.url, f"dir://{tmp_path}/tier", tmp_path / "hydrator",
                    cache_allowed_roots=str(data), **getattr(request, "param", {}))
    async with hs.running(s):
        yield data


async def test_a_dataset_is_hydrated_in_use_deferred_while_read_and_removed_after(
        datasets: Datasets, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path,
        start_bridge, hydrator: Path) -> None:
    total = write_files(hydrator / "imagenet", {"train/a.jpg": 300_000, "train/b.jpg": 5_000,
                                                "val/c.jpg": 70_000, "tmp/x.log": 10})
    await start_bridge(bridge_kubeconfig)
    created = datasets.create("imagenet", {"source": f"file://{hydrator}/imagenet", "exclude": ["tmp/**"]})
    uid = created["metadata"]["uid"]
    [add] = await datasets.wait_requests(1)
    assert add.request_id == f"cr.{uid}.1" and add.WhichOneof("action") == "add"
    assert (add.add.name, add.add.namespace, add.add.source, list(add.add.exclude), add.add.owner) == (
        "imagenet", datasets.ns, f"file://{hydrator}/imagenet", ["tmp/**"], f"Dataset {datasets.ns}/imagenet")

    ready = await datasets.wait_status("imagenet", lambda s: s.get("phase") == "Ready", "Ready")
    status = ready["status"]
    assert ready["metadata"]["finalizers"] == [FINALIZER]
    assert (status["totalBytes"], status["cachedBytes"], status["filesTotal"], status["filesCached"]) == (
        total - 10, total - 10, 3, 3)
    assert (status["progress"], status["cached"], status["observedGeneration"]) == (1.0, "366.2Ki/366.2Ki", 1)
    assert conditions(status)["Ready"] == ("True", "Hydrated")
    assert conditions(status)["Hydrating"][0] == "False"
    table = kube.kubectl("get", "datasets")
    assert table.split("\n")[0].split() == ["NAME", "PHASE", "CACHED", "AGE"]
    assert table.split("\n")[1].split()[:3] == ["imagenet", "Ready", "366.2Ki/366.2Ki"]

    # pin changes in place: one more add, the data set stays Ready.
    datasets.patch("imagenet", {"spec": {"pin": True}})
    requests = await datasets.wait_requests(2)
    assert (requests[1].request_id, requests[1].add.pin) == (f"cr.{uid}.2", True)
    await datasets.wait_status("imagenet", lambda s: s.get("requestId") == f"cr.{uid}.2"
                               and s.get("phase") == "Ready", "Ready for generation 2")

    # A running pod reads it (and a data set nobody created): InUse, and an Event for the other.
    [node] = kwok_nodes(1)
    kube.core.create_namespaced_pod(datasets.ns, reading_pod("train", node, {DATASET: "imagenet,coco"}))
    await asyncio.to_thread(kwok_nodes.wait_for_phase, datasets.ns, "train", "Running")
    missing = await wait_event(kube, "train", "DatasetNotFound")
    assert missing.type == "Warning" and "has no Dataset 'coco'" in missing.message
    assert [e.reason for e in pod_events(kube, "train") if e.reason.startswith("Dataset")] == ["DatasetNotFound"]
    in_use = await datasets.wait_status("imagenet", lambda s: conditions(s).get("InUse", ("",))[0] == "True", "InUse")
    assert "train" in next(c["message"] for c in in_use["status"]["conditions"] if c["type"] == "InUse")

    # Deleting it while the pod runs: deferred, the pod named; nothing removed from the cache.
    datasets.delete("imagenet")
    deferred = await datasets.wait_status(
        "imagenet", lambda s: conditions(s).get("DeletionDeferred", ("",))[0] == "True", "DeletionDeferred")
    message = next(c["message"] for c in deferred["status"]["conditions"] if c["type"] == "DeletionDeferred")
    assert "train" in message and deferred["metadata"]["deletionTimestamp"]
    assert [r.WhichOneof("action") for r in await datasets.requests()] == ["add", "add"]
    assert (await hs.status(datasets.bus, f"{datasets.ns}.imagenet")).phase == hs.PHASE.CACHE_PHASE_READY

    # The pod ends: the Dataset is removed from the cache and goes.
    kwok_nodes.finish(datasets.ns, "train")
    await datasets.wait_gone("imagenet")
    remove = (await datasets.wait_requests(3))[2]
    assert (remove.request_id, remove.remove.name, remove.remove.namespace) == (
        f"cr.{uid}.delete", "imagenet", datasets.ns)

    async def removed() -> bool:
        return await hs.status(datasets.bus, f"{datasets.ns}.imagenet") is None
    await wait_for(removed, timeout=20, what="the hydrator removed the data set")


async def test_annotated_pods_get_their_hostpath_data_hydrated_and_bad_annotations_an_event(
        datasets: Datasets, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path,
        start_bridge, hydrator: Path) -> None:
    total = write_files(hydrator / "seed", {"part-0": 4096, "part-1": 1000})
    await start_bridge(bridge_kubeconfig)
    [node] = kwok_nodes(1)
    pod = reading_pod("seed", node, {SEED_CACHE_DATASET: "yes"}, {"train": str(hydrator / "seed")})
    pod["spec"]["serviceAccountName"] = "kube-bridge"  # any existing account: it is the owner
    kube.core.create_namespaced_pod(datasets.ns, pod)
    name = host_path_name(str(hydrator / "seed"))
    [add] = await datasets.wait_requests(1)
    uid = kube.core.read_namespaced_pod("seed", datasets.ns).metadata.uid
    assert add.request_id == f"pod.{uid}.{name}"
    assert (add.add.name, add.add.namespace, add.add.source, add.add.owner) == (
        name, datasets.ns, f"file://{hydrator}/seed", "kube-bridge")
    hydrated = await hs.settled(datasets.bus, f"{datasets.ns}.{name}", add.request_id)
    assert (hydrated.phase, hydrated.cached_bytes) == (hs.PHASE.CACHE_PHASE_READY, total)

    # A second pod over the same directory: the bus has the data set, nothing is asked again;
    # and no Event: the hostPath data set needs no Dataset object.
    kube.core.create_namespaced_pod(datasets.ns, reading_pod(
        "seed-2", node, {SEED_CACHE_DATASET: "yes"}, {"data": str(hydrator / "seed")}))
    # Pods naming a data set badly get the parser's text as a Warning Event, and run anyway.
    kube.core.create_namespaced_pod(datasets.ns, reading_pod("bad-name", node, {DATASET: "ImageNet"}))
    kube.core.create_namespaced_pod(datasets.ns, reading_pod("no-volumes", node, {SEED_CACHE_DATASET: "yes"}))
    bad = await wait_event(kube, "bad-name", "DatasetAnnotationInvalid")
    assert bad.type == "Warning" and "data set name 'ImageNet' is not valid" in bad.message
    none = await wait_event(kube, "no-volumes", "DatasetAnnotationInvalid")
    assert "the pod has none" in none.message
    # The Alnair form naming the seed pod's data set: known on the bus, so no DatasetNotFound.
    kube.core.create_namespaced_pod(datasets.ns, reading_pod("by-name", node, {DATASET: name}))
    await asyncio.to_thread(kwok_nodes.wait_for_phase, datasets.ns, "by-name", "Running")
    await asyncio.to_thread(kwok_nodes.wait_for_phase, datasets.ns, "seed-2", "Running")
    marker = await wait_event(kube, "bad-name", "DatasetAnnotationInvalid")  # all handled by now
    assert marker is not None
    assert [r.request_id for r in await datasets.requests()] == [add.request_id]
    assert not [e for p in ("seed", "seed-2", "by-name") for e in pod_events(kube, p)
                if e.reason.startswith("Dataset")]
    assert len([e for e in pod_events(kube, "bad-name") if e.reason.startswith("Dataset")]) == 1


async def test_a_seed_form_pods_state_names_its_hostpath_data_sets(
        datasets: Datasets, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path,
        start_bridge, tmp_path: Path) -> None:
    """The state kube-bridge records for an Alnair pod in the seed's form names the data sets
    its hostPath volumes are (with the ones its annotation names), so the cache hydrator,
    which reads the states, keeps them from eviction while the pod lives."""
    await start_bridge(bridge_kubeconfig)
    [node] = kwok_nodes(1)
    train, val = tmp_path / "train", tmp_path / "val"
    pod = reading_pod("seed-gpu", node, {SEED_CACHE_DATASET: "yes", DATASET: "imagenet"},
                      {"train": str(train), "val": str(val)})
    pod["spec"]["schedulerName"] = "alnair-scheduler"  # an Alnair pod: its lifecycle is relayed
    uid = kube.core.create_namespaced_pod(datasets.ns, pod).metadata.uid
    states = await TypedKV.open(datasets.bus, "workload_states", wl.WorkloadEvent)

    async def recorded() -> wl.WorkloadEvent | None:
        return next((e for e in (await states.current()).values()
                     if e.workload.ref.uid == uid and e.workload.phase == wl.WORKLOAD_PHASE_RUNNING), None)
    state = await wait_for(recorded, timeout=20, what="the seed pod's running state recorded")
    assert state.workload.annotations[DATASET] == ",".join(
        ("imagenet", host_path_name(str(train)), host_path_name(str(val))))
    assert SEED_CACHE_DATASET not in state.workload.annotations  # not one of Alnair's keys


# Hydrating a takes 6 s: its reports come while the bridge is down.
@pytest.mark.parametrize("hydrator", [{"cache_hydrate_bytes_per_second": 2 << 20}], indirect=True)
async def test_a_restarted_bridge_loses_no_report_and_sends_nothing_twice(
        datasets: Datasets, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path,
        start_bridge, hydrator: Path) -> None:
    for name, size in (("a", 12 << 20), ("b", 2048), ("c", 1024)):
        write_files(hydrator / name, {"x": size})
    bridge = await start_bridge(bridge_kubeconfig)
    a = datasets.create("a", {"source": f"file://{hydrator}/a"})
    c = datasets.create("c", {"source": f"file://{hydrator}/c"})
    await datasets.wait_status("c", lambda s: s.get("phase") == "Ready", "c Ready")
    [node] = kwok_nodes(1)
    kube.core.create_namespaced_pod(datasets.ns, reading_pod("reader", node, {DATASET: "a,c"}))
    await asyncio.to_thread(kwok_nodes.wait_for_phase, datasets.ns, "reader", "Running")
    await datasets.wait_status("a", lambda s: conditions(s).get("InUse", ("",))[0] == "True", "a InUse")
    datasets.delete("c")
    await datasets.wait_status("c", lambda s: conditions(s).get("DeletionDeferred", ("",))[0] == "True",
                               "c deferred")
    await bridge.stop()

    # While it is down: a is hydrated, b is created, the reader of a and c ends.
    await hs.settled(datasets.bus, f"{datasets.ns}.a", f"cr.{a['metadata']['uid']}.1")
    assert datasets.get("a")["status"]["phase"] != "Ready", "nobody wrote the report yet"
    b = datasets.create("b", {"source": f"file://{hydrator}/b"})
    kwok_nodes.finish(datasets.ns, "reader")
    await asyncio.to_thread(kwok_nodes.wait_for_phase, datasets.ns, "reader", "Succeeded")

    await start_bridge(bridge_kubeconfig)
    ready = await datasets.wait_status("a", lambda s: s.get("phase") == "Ready", "a Ready from the stream")
    assert ready["status"]["cachedBytes"] == 12 << 20
    await datasets.wait_status("a", lambda s: conditions(s).get("InUse", ("",))[0] == "False", "a not InUse")
    await datasets.wait_status("b", lambda s: s.get("phase") == "Ready", "b Ready")
    await datasets.wait_gone("c")
    uid = {obj["metadata"]["name"]: obj["metadata"]["uid"] for obj in (a, b, c)}
    requests = [(r.WhichOneof("action"), r.request_id) for r in await datasets.requests()]
    assert sorted(requests) == sorted([("add", f"cr.{uid['a']}.1"), ("add", f"cr.{uid['b']}.1"),
                                       ("add", f"cr.{uid['c']}.1"), ("remove", f"cr.{uid['c']}.delete")])


async def test_a_failed_hydration_shows_its_reason_and_fix(
        datasets: Datasets, bridge_kubeconfig: Path, start_bridge, hydrator: Path) -> None:
    await start_bridge(bridge_kubeconfig)
    datasets.create("outside", {"source": "file:///etc/alnair-not-allowed"})
    failed = await datasets.wait_status("outside", lambda s: s.get("phase") == "Failed", "Failed")
    status = failed["status"]
    assert status["reason"] == "path-not-allowed" and str(hydrator) in status["message"]
    assert conditions(status)["Ready"] == ("False", "PathNotAllowed")
    assert conditions(status)["Hydrating"] == ("False", "PathNotAllowed")


async def test_a_dataset_whose_name_holds_other_data_shows_the_hydrators_refusal(
        datasets: Datasets, kube: KubeNamespace, bus: Bus, bridge_kubeconfig: Path, start_bridge,
        hydrator: Path) -> None:
    """Someone added ns/shared on the bus (as `alnair dataset add` would) from one directory;
    a Dataset of that name with another source is refused by the hydrator, and the object says
    why instead of staying Pending; the other data set is untouched."""
    write_files(hydrator / "theirs", {"a.bin": 1000})
    write_files(hydrator / "mine", {"b.bin": 2000})
    theirs = hs.spec("shared", f"file://{hydrator}/theirs", namespace=kube.namespace, owner="bob")
    await hs.settled(bus, f"{kube.namespace}.shared", await hs.add(bus, theirs))
    await start_bridge(bridge_kubeconfig)
    datasets.create("shared", {"source": f"file://{hydrator}/mine"})
    failed = await datasets.wait_status("shared", lambda s: s.get("phase") == "Failed", "Failed")
    status = failed["status"]
    assert status["reason"] == "invalid-spec" and "already exists with other data" in status["message"]
    kept = await hs.status(bus, f"{kube.namespace}.shared")
    assert kept is not None and kept.phase == hs.PHASE.CACHE_PHASE_READY
    assert kept.source == f"file://{hydrator}/theirs"


# -- reports as the hydrator publishes them --------------------------------------------------------


def report(namespace: str, name: str, phase: int, *, request_id: str, second: int,
           cached: int = 0, total: int = 100, reason: str = "") -> cache_pb2.CacheDatasetStatus:
    at = Timestamp()
    at.GetCurrentTime()
    at.seconds += second
    source = SPEC["source"]
    return cache_pb2.CacheDatasetStatus(
        dataset=name, namespace=namespace, source=source, phase=phase, total_bytes=total,
        cached_bytes=cached, files_total=2, files_cached=1 if cached else 0, observed_at=at,
        reason=reason, message=f"{reason or 'report'} {second}", progress=cached / total,
        request_id=request_id, spec=cache_pb2.CacheDatasetSpec(name=name, namespace=namespace, source=source))


async def test_only_the_newest_report_of_this_object_is_written(
        datasets: Datasets, bridge_kubeconfig: Path, start_bridge) -> None:
    await start_bridge(bridge_kubeconfig)
    uid = datasets.create("imagenet")["metadata"]["uid"]
    await datasets.wait_requests(1)
    subject = subjects.cache_status(f"{datasets.ns}.imagenet")
    mine = f"cr.{uid}.1"
    await datasets.bus.publish(subject, report(datasets.ns, "imagenet", hs.PHASE.CACHE_PHASE_HYDRATING,
                                               request_id=mine, second=2, cached=40))
    hydrating = await datasets.wait_status("imagenet", lambda s: s.get("cachedBytes") == 40, "40 bytes")
    assert conditions(hydrating["status"])["Hydrating"] == ("True", "Hydrating")
    assert hydrating["status"]["cached"] == "40B/100B"
    # Older, another object's and another source's reports are not written.
    await datasets.bus.publish(subject, report(datasets.ns, "imagenet", hs.PHASE.CACHE_PHASE_READY,
                                               request_id=mine, second=1, cached=100))
    await datasets.bus.publish(subject, report(datasets.ns, "imagenet", hs.PHASE.CACHE_PHASE_READY,
                                               request_id="cr.another-uid.1", second=3, cached=100))
    other = report(datasets.ns, "imagenet", hs.PHASE.CACHE_PHASE_READY, request_id="cli", second=4, cached=100)
    other.source = "s3://someone-else/data"
    await datasets.bus.publish(subject, other)
    await datasets.bus.publish(subject, report(datasets.ns, "imagenet", hs.PHASE.CACHE_PHASE_FAILED,
                                               request_id=mine, second=5, cached=40,
                                               reason="source-unreachable"))
    failed = await datasets.wait_status("imagenet", lambda s: s.get("phase") == "Failed", "Failed")
    assert failed["status"]["cachedBytes"] == 40, "no READY report of another data set came between"
    assert conditions(failed["status"])["Ready"] == ("False", "SourceUnreachable")
    assert failed["status"]["message"] == "source-unreachable 5"


def test_conditions_keep_their_transition_time_until_their_status_flips() -> None:
    def merged(status: dict, new: dict | None) -> dict:
        assert new is not None
        return {**status, **new}

    def times(status: dict) -> dict[str, tuple[str, str, str]]:
        return {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"]) for c in status["conditions"]}

    first = merged({}, from_cache_status({}, report("ns", "d", hs.PHASE.CACHE_PHASE_PENDING, request_id="r", second=0)))
    later = merged(first, from_cache_status(first, report("ns", "d", hs.PHASE.CACHE_PHASE_HYDRATING,
                                                            request_id="r", second=5, cached=10)))
    assert times(later)["Hydrating"][2] == times(first)["Hydrating"][2], "still True: time kept"
    ready = merged(later, from_cache_status(later, report("ns", "d", hs.PHASE.CACHE_PHASE_READY,
                                                            request_id="r", second=9, cached=100)))
    assert times(ready)["Ready"][:2] == ("True", "Hydrated") and times(ready)["Ready"][2] != times(later)["Ready"][2]
    assert from_cache_status(ready, report("ns", "d", hs.PHASE.CACHE_PHASE_HYDRATING, request_id="r", second=7)) is None
    used = merged(ready, usage(ready, ["p1", "p2"], deleting=True, when=datetime.now(UTC)))
    assert times(used)["InUse"][:2] == ("True", "PodsReading")
    assert times(used)["DeletionDeferred"][:2] == ("True", "PodsReading")
    assert usage(used, ["p2", "p1"], deleting=True, when=datetime.now(UTC)) is None, "nothing new to write"
    assert [binary_bytes(n) for n in (0, 1023, 1536, 5 << 30)] == ["0B", "1023B", "1.5Ki", "5.0Gi"]
