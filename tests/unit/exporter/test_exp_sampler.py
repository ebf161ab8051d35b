"""NodeSampler: attribution order, unattributed processes, and grace-period expiry on a
virtual clock (no waiting)."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair.v1 import workload_pb2
from alnair_common.cuda_region import DeviceRecord
from alnair_common.testing.cuda_region_writer import RegionWriter
from alnair_exporter import NodeSampler, RegionScanner, StaticResolver, WorkloadDirectory, WorkloadUpdate
from alnair_gpu import ReplaySampler, load_recording

SHARE = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200" / "share_cnn_transformer.jsonl.gz"


def _event(uid: str, name: str, phase: int = workload_pb2.WORKLOAD_PHASE_RUNNING, seq: int = 1) -> WorkloadUpdate:
    event = workload_pb2.WorkloadEvent(sequence=seq)
    event.workload.ref.uid, event.workload.ref.name, event.workload.ref.namespace = uid, name, "ml"
    event.workload.phase = phase
    return WorkloadUpdate.from_proto(event)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def node(tmp_path: Path) -> tuple[NodeSampler, WorkloadDirectory, Clock, Path]:
    clock, directory = Clock(), WorkloadDirectory()
    directory.apply(_event("uid-cnn", "cnn"), clock.now)
    directory.apply(_event("uid-tr", "transformer"), clock.now)
    gpu = ReplaySampler(load_recording(SHARE), clock=clock, position=lambda: 15.0)
    sampler = NodeSampler("n1", gpu=gpu, scanner=RegionScanner(tmp_path, directory), directory=directory,
                          resolver=StaticResolver({469: "uid-tr"}), grace_seconds=30.0, clock=clock)
    return sampler, directory, clock, tmp_path


def test_region_pids_and_the_resolver_attribute_processes(node) -> None:  # type: ignore[no-untyped-def]
    sampler, _, _, ws = node
    (ws / "uid-cnn").mkdir()
    RegionWriter(ws / "uid-cnn" / "cuda.region", workload_id="uid-cnn").write_slot(0, pid=3, host_pid=468)
    view = sampler.sample()
    owners = {p.sample.pid: p.workload.name if p.workload else None for p in view.processes}
    assert owners == {468: "cnn", 469: "transformer"}
    pods = {s.workload.name: s.gpus[0] for s in view.series}
    assert pods["cnn"].memory_used_bytes == 2004877312 and pods["cnn"].sm_utilization_ratio == 0.99
    assert pods["transformer"].memory_bandwidth_ratio == 0.26 and pods["transformer"].gpu_index == 0


def test_a_process_nobody_knows_stays_off_the_pod_series(node) -> None:  # type: ignore[no-untyped-def]
    sampler, _, _, _ = node
    sampler.resolver = StaticResolver({})
    view = sampler.sample()
    assert {p.workload for p in view.processes} == {None}
    assert view.series == ()
    assert {p.pid for p in view.batch().processes} == {468, 469}  # still published, without a workload


def test_series_stay_for_the_grace_period_after_the_workload_finished(node) -> None:  # type: ignore[no-untyped-def]
    sampler, directory, clock, _ = node
    assert {s.workload.uid for s in sampler.sample().series} == {"uid-tr"}
    directory.apply(_event("uid-tr", "transformer", workload_pb2.WORKLOAD_PHASE_SUCCEEDED, seq=2), clock.now)
    clock.now += 29.0
    kept = sampler.sample().series
    assert [(s.workload.uid, s.live) for s in kept] == [("uid-tr", False)]
    clock.now += 2.0
    assert sampler.sample().series == ()
    assert directory.get("uid-tr") is None  # forgotten too: the directory stays bounded


def test_stale_events_do_not_undo_newer_ones(node) -> None:  # type: ignore[no-untyped-def]
    _, directory, clock, _ = node
    directory.apply(_event("uid-cnn", "cnn", workload_pb2.WORKLOAD_PHASE_FAILED, seq=5), clock.now)
    assert not directory.apply(_event("uid-cnn", "cnn", workload_pb2.WORKLOAD_PHASE_RUNNING, seq=4), clock.now)
    assert directory.finished_at("uid-cnn") == clock.now


def test_exited_processes_keep_their_counters_but_not_their_memory(tmp_path: Path) -> None:
    directory = WorkloadDirectory()
    directory.apply(_event("uid-a", "a"), 0.0)
    (tmp_path / "uid-a").mkdir()
    region = RegionWriter(tmp_path / "uid-a" / "cuda.region", workload_id="uid-a")
    region.write_slot(0, pid=1, devices={0: DeviceRecord(kernel_launches=10, memory_used_bytes=100)})
    region.write_slot(1, pid=2, state="exited", devices={0: DeviceRecord(kernel_launches=5, memory_used_bytes=7)})
    (reading,) = RegionScanner(tmp_path, directory).scan()
    (usage,) = reading.usage(lambda d: f"gpu{d}")
    assert (usage.kernel_launches_total, usage.memory_used_bytes, usage.processes) == (15, 100, 1)
    assert usage.memory_limit_bytes is None and usage.gpu_uuid == "gpu0"


def test_the_directory_forgets_finished_workloads_never_seen_here() -> None:
    directory = WorkloadDirectory()
    for n in range(100):  # pods that ran and finished elsewhere in the node's view of the stream
        directory.apply(_event(f"uid-{n}", f"p{n}", workload_pb2.WORKLOAD_PHASE_SUCCEEDED), 0.0)
    directory.apply(_event("uid-live", "live"), 0.0)
    assert directory.sweep(now=10.0, keep_seconds=30.0) == 0
    assert directory.sweep(now=31.0, keep_seconds=30.0) == 100
    assert len(directory) == 1 and directory.get("uid-live") is not None


def test_an_exited_region_left_on_disk_does_not_come_back_after_its_grace(tmp_path: Path) -> None:
    clock, directory = Clock(), WorkloadDirectory()
    directory.apply(_event("uid-done", "done"), clock.now)
    (tmp_path / "uid-done").mkdir()
    region = RegionWriter(tmp_path / "uid-done" / "cuda.region", workload_id="uid-done")
    region.write_slot(0, pid=1, state="exited", devices={0: DeviceRecord(kernel_launches=3)})
    sampler = NodeSampler("n1", gpu=None, scanner=RegionScanner(tmp_path, directory), directory=directory,
                          grace_seconds=10.0, clock=clock)
    assert [(s.workload.uid, s.live) for s in sampler.sample().series] == [("uid-done", False)]
    for _ in range(5):  # 5 periods of 5 s: gone after the grace period, and stays gone
        clock.now += 5.0
        shown = sampler.sample().series
    assert shown == ()
    # the same workload running again (a restarted process attaches) is shown again
    region.write_slot(0, pid=2, devices={0: DeviceRecord(kernel_launches=4)})
    clock.now += 5.0
    assert [(s.workload.uid, s.live) for s in sampler.sample().series] == [("uid-done", True)]


def test_dormant_regions_are_not_read_again_until_they_change(tmp_path: Path) -> None:
    clock, directory = Clock(), WorkloadDirectory()
    directory.apply(_event("uid-old", "old"), clock.now)
    (tmp_path / "uid-old").mkdir()
    RegionWriter(tmp_path / "uid-old" / "cuda.region", workload_id="uid-old").write_slot(
        0, pid=1, state="exited", devices={0: DeviceRecord(kernel_launches=3)})
    (tmp_path / "stranger").mkdir()
    RegionWriter(tmp_path / "stranger" / "cuda.region", workload_id="uid-later")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "cuda.region").write_bytes(b"\0" * 10)
    scanner = RegionScanner(tmp_path, directory)
    sampler = NodeSampler("n1", gpu=None, scanner=scanner, directory=directory, grace_seconds=10.0, clock=clock)
    for _ in range(6):  # past the old workload's grace period
        clock.now += 5.0
        sampler.sample()
    reads = scanner.reads
    for _ in range(10):
        clock.now += 5.0
        assert sampler.sample().series == ()
    assert scanner.reads == reads  # nothing was decoded again: every region is dormant
    # an event naming the stranger's workload wakes its region
    directory.apply(_event("uid-later", "later"), clock.now)
    clock.now += 5.0
    assert [s.workload.uid for s in sampler.sample().series] == ["uid-later"]
    # a process attaching to the old workload's region again wakes it too
    RegionWriter(tmp_path / "uid-old" / "cuda.region", workload_id="uid-old").write_slot(
        0, pid=2, devices={0: DeviceRecord(kernel_launches=1)})
    clock.now += 5.0
    assert {(s.workload.uid, s.live) for s in sampler.sample().series} >= {("uid-old", True)}
