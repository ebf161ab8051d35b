"""Series summaries, input validation at the edge, profile conversion, settings."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import common_pb2, metrics_pb2, profile_pb2, workload_pb2
from alnair_common import ConfigError, load_settings
from alnair_profiler import ProfilerSettings, SeriesSummary, WorkloadProfile
from alnair_profiler._accumulator import WorkloadState
from alnair_profiler._domain import InvalidInputError, Point, Rejected, points_from_batch, workload_from_event
from alnair_profiler._profile import SERIES
from alnair_profiler._series import MAX_POINTS, Series


def test_deciles_are_nearest_rank_percentiles() -> None:
    s = SeriesSummary.of([float(v) for v in range(1, 101)])
    assert s.deciles == tuple(float(v) for v in range(10, 101, 10))
    assert s.max == 100.0 and s.samples == 100
    assert SeriesSummary.of([5.0]).deciles == (5.0,) * 10
    assert SeriesSummary.of([]) == SeriesSummary()


def test_thinning_keeps_the_exact_maximum_and_count() -> None:
    series = Series()
    for i in range(3 * MAX_POINTS):
        series.add(float(i), 1.0 if i != 12_345 else 99.0)
    assert len(series.values) <= MAX_POINTS
    summary = series.summary()
    assert summary.max == 99.0 and summary.samples == 3 * MAX_POINTS


def _ts(seconds: float) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(datetime.fromtimestamp(seconds, UTC))
    return t


def test_impossible_values_are_rejected_one_by_one() -> None:
    ref = common_pb2.WorkloadRef(uid="u")
    batch = metrics_pb2.NodeSampleBatch(node="n", sampled_at=_ts(1000.0), processes=[
        metrics_pb2.ProcessSample(pid=1, sm_utilization_ratio=math.nan, memory_used_bytes=5, workload=ref),
        metrics_pb2.ProcessSample(pid=2, sm_utilization_ratio=3.0, memory_used_bytes=7, workload=ref),
        metrics_pb2.ProcessSample(pid=3, sm_utilization_ratio=0.5, workload=common_pb2.WorkloadRef()),
    ], hosts=[metrics_pb2.HostSample(workload=ref, cpu_cores=-1.0, memory_bytes=10)])
    items = list(points_from_batch(batch))
    rejected = {(r.metric, r.why) for r in items if isinstance(r, Rejected)}
    assert rejected == {("gpu_utilization_ratio", "not a number"), ("gpu_utilization_ratio", "ratio above 1.05"),
                        ("cpu_cores", "negative")}
    points = {p.metric: p.value for p in items if isinstance(p, Point)}
    assert points["gpu_memory_bytes"] == 12  # both processes of the workload, summed
    assert points["memory_bytes"] == 10 and "cpu_cores" not in points
    assert all(p.uid == "u" for p in items)  # the unattributed process is not ours


def test_events_without_uid_or_phase_are_refused_with_the_fix() -> None:
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(name="x", namespace="ns"),
                              phase=workload_pb2.WORKLOAD_PHASE_RUNNING)
    with pytest.raises(InvalidInputError, match="has no uid: publishers must set workload.ref.uid"):
        workload_from_event(workload_pb2.WorkloadEvent(workload=w))
    w.ref.uid = "u"
    w.phase = workload_pb2.WORKLOAD_PHASE_UNSPECIFIED
    with pytest.raises(InvalidInputError, match="has no phase"):
        workload_from_event(workload_pb2.WorkloadEvent(workload=w))


def test_a_terminal_event_without_end_time_ends_when_it_was_observed() -> None:
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(uid="u"), phase=workload_pb2.WORKLOAD_PHASE_FAILED)
    info = workload_from_event(workload_pb2.WorkloadEvent(workload=w, observed_at=_ts(1234.0)))
    assert info.finished and info.finished_at == datetime.fromtimestamp(1234.0, UTC)
    w.phase = workload_pb2.WORKLOAD_PHASE_RUNNING
    assert workload_from_event(workload_pb2.WorkloadEvent(workload=w, observed_at=_ts(1234.0))).finished_at is None


def test_profile_round_trips_through_record_and_message() -> None:
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(uid="u", name="p", namespace="ns",
                                                         mode=common_pb2.MODE_KUBERNETES),
                              phase=workload_pb2.WORKLOAD_PHASE_SUCCEEDED, started_at=_ts(10), finished_at=_ts(20),
                              owners=[common_pb2.OwnerRef(kind="Job", name="j", uid="o", api_version="batch/v1")])
    info = workload_from_event(workload_pb2.WorkloadEvent(workload=w, sequence=4))
    profile = WorkloadProfile(info, {"cpu_cores": SeriesSummary.of([1.0, 2.0])})
    again = WorkloadProfile.from_doc(profile.to_doc())
    assert again.to_doc() == profile.to_doc()
    msg = profile.to_proto()
    assert msg.workload.uid == "u" and msg.phase == workload_pb2.WORKLOAD_PHASE_SUCCEEDED
    assert msg.cpu_cores.max == 2.0 and len(msg.cpu_cores.deciles) == 10
    assert msg.finished_at.seconds == 20 and msg.owners[0].name == "j"
    assert profile.object_ref().kind == "Pod"
    assert profile.annotations()["ai.centaurus.io/max-cpu-cores"] == "2"
    assert all(k.startswith("ai.centaurus.io/") for k in profile.annotations())


def test_exit_totals_raise_the_host_maxima_of_a_workload_with_no_samples() -> None:
    """A local workload that ended within one sampling period: its reaper's totals are its
    host figures (peak memory as is, CPU and disk as mean rates over its 2 s), and they travel
    in the record and the message."""
    usage = workload_pb2.ResourceUsage(cpu_user_seconds=1.5, cpu_system_seconds=0.5, max_rss_bytes=300 << 20,
                                       disk_read_bytes=4_000_000, disk_write_bytes=2_000_000)
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(uid="u", mode=common_pb2.MODE_LOCAL),
                              phase=workload_pb2.WORKLOAD_PHASE_SUCCEEDED, started_at=_ts(10), finished_at=_ts(12),
                              usage=usage)
    info = workload_from_event(workload_pb2.WorkloadEvent(workload=w))
    profile = WorkloadState("u").profile(info)
    s = profile.summaries
    assert s["memory_bytes"].max == 300 << 20 and s["memory_bytes"].samples == 0
    assert s["cpu_cores"].max == pytest.approx(1.0) and s["disk_io_bytes_per_second"].max == pytest.approx(3e6)
    assert s["gpu_utilization_ratio"].max == 0  # nothing proven about the GPU
    assert profile.to_proto().usage == usage
    assert WorkloadProfile.from_doc(profile.to_doc()).info.usage == info.usage
    assert float(profile.annotations()["ai.centaurus.io/max-memory-bytes"]) == pytest.approx(300 << 20, rel=1e-5)

    sampled = WorkloadState("u")  # samples above the floors keep their maxima
    sampled.add(Point("u", "cpu_cores", 10.5, 3.0))
    sampled.add(Point("u", "memory_bytes", 10.5, float(400 << 20)))
    kept = sampled.profile(info).summaries
    assert kept["cpu_cores"].max == 3.0 and kept["memory_bytes"].max == 400 << 20


def test_exit_totals_that_are_not_numbers_are_dropped_not_the_event() -> None:
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(uid="u"), phase=workload_pb2.WORKLOAD_PHASE_FAILED,
                              usage=workload_pb2.ResourceUsage(cpu_user_seconds=math.nan, max_rss_bytes=5))
    info = workload_from_event(workload_pb2.WorkloadEvent(workload=w))
    assert info.finished and info.usage is None
    w.usage.cpu_user_seconds = -1.0
    assert workload_from_event(workload_pb2.WorkloadEvent(workload=w)).usage is None


def test_every_recorded_series_is_in_the_message_copy_directions_included() -> None:
    w = workload_pb2.Workload(ref=common_pb2.WorkloadRef(uid="u"), phase=workload_pb2.WORKLOAD_PHASE_SUCCEEDED)
    info = workload_from_event(workload_pb2.WorkloadEvent(workload=w))
    rates = {"htod": [1e9, 3e9], "dtoh": [2e8], "dtod": [5e10, 6e10]}
    summaries = {f"memcpy_{d}_bytes_per_second": SeriesSummary.of(v) for d, v in rates.items()}
    msg = WorkloadProfile(info, summaries).to_proto()
    assert msg.memcpy_htod_bytes_per_second.max == 3e9
    assert msg.memcpy_dtoh_bytes_per_second.max == 2e8 and msg.memcpy_dtoh_bytes_per_second.samples == 1
    assert msg.memcpy_dtod_bytes_per_second.max == 6e10
    assert set(SERIES) <= set(profile_pb2.WorkloadProfile.DESCRIPTOR.fields_by_name)


def test_bad_settings_name_the_variable_and_the_fix() -> None:
    with pytest.raises(ConfigError, match="ALNAIR_MONGO_URL='http://db'.*mongodb://"):
        load_settings(ProfilerSettings, mongo_url="http://db")
    with pytest.raises(ConfigError, match="ALNAIR_PROMETHEUS_URL"):
        load_settings(ProfilerSettings, prometheus_url="prom:9090")
