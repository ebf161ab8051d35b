"""ReplaySampler: NVML's hold-last-value semantics, re-based time, widening, clear errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from alnair_gpu import ReplaySampler, SampleSourceError, load_recording

SHARE = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h200" / "share_cnn_transformer.jsonl.gz"
UUID = "GPU-test"


def _write(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def _gpu(util: int) -> dict:
    return {"index": 0, "uuid": UUID, "utilization_gpu_pct": util, "utilization_memory_pct": 1,
            "memory_used_bytes": 10, "memory_total_bytes": 100, "power_mw": 1500, "temperature_c": 30,
            "sm_clock_mhz": 1000}


def _proc(pid: int, sm: int | None, used: int | None = 5) -> dict:
    row = {"pid": pid, "uuid": UUID, "sm_util_pct": sm, "mem_util_pct": None if sm is None else sm // 2}
    if used is not None:
        row["used_memory_bytes"] = used
    return row


@pytest.fixture
def small(tmp_path: Path) -> Path:
    header = {"kind": "header", "scenario": "small", "interval_s": 1.0,
              "inventory": {"gpus": [{"uuid": UUID, "name": "Test GPU"}]},
              "workloads": [{"pid": 1, "workload": "a", "is_training": True}]}
    samples = [
        {"kind": "sample", "t": 5.0, "gpus": [_gpu(10)], "processes": [_proc(1, None)]},
        {"kind": "sample", "t": 6.0, "gpus": [_gpu(20)], "processes": [_proc(1, 40)]},
        {"kind": "sample", "t": 7.0, "gpus": [_gpu(30)], "processes": [_proc(1, None, used=None), _proc(2, 8)]},
    ]
    return _write(tmp_path / "small.jsonl.gz", [header, *samples, {"kind": "truth", "workloads": []}])


def test_per_process_values_are_held_between_nvml_samples_and_none_before_the_first(small: Path) -> None:
    now = [100.0]
    sampler = ReplaySampler(load_recording(small), clock=lambda: now[0])
    first = sampler.sample()
    assert first.sampled_at == 100.0 and first.simulated  # re-based to the clock, labelled simulated
    assert [(p.pid, p.sm_utilization_ratio) for p in first.processes] == [(1, None)]
    now[0] = 101.0
    assert sampler.sample().processes[0].sm_utilization_ratio == 0.4
    now[0] = 102.5
    third = sampler.sample()
    held = {p.pid: (p.sm_utilization_ratio, p.memory_bandwidth_ratio, p.memory_used_bytes) for p in third.processes}
    assert held == {1: (0.4, 0.2, 5), 2: (0.08, 0.04, 5)}
    assert third.devices[0].utilization_ratio == 0.3 and third.devices[0].power_watts == 1.5
    assert third.devices[0].sm_clock_hertz == 1e9 and third.devices[0].name == "Test GPU"
    now[0] = 103.0  # 3 s = one loop of a 3-frame, 1 s recording: back to the first frame
    assert sampler.sample().devices[0].utilization_ratio == 0.1


def test_the_real_h200_recording_holds_values_like_nvml() -> None:
    sampler = ReplaySampler(load_recording(SHARE), position=lambda: 15.0)
    # raw row t=21.019 has no new per-process sample: the last ones were 99/25 (pid 468, t=20.72)
    # and 99/26 (pid 469, t=20.92)
    got = {p.pid: (p.sm_utilization_ratio, p.memory_bandwidth_ratio) for p in sampler.sample().processes}
    assert got == {468: (0.99, 0.25), 469: (0.99, 0.26)}


def test_widening_to_8_gpus_by_64_processes() -> None:
    sampler = ReplaySampler(load_recording(SHARE), position=lambda: 15.0, gpus=8, processes_per_gpu=64)
    snap = sampler.sample()
    assert len(snap.devices) == 8 and len({d.uuid for d in snap.devices}) == 8
    assert len(snap.processes) == 512 and len({p.pid for p in snap.processes}) == 512
    assert {p.gpu_uuid for p in snap.processes} == {d.uuid for d in snap.devices}
    assert sampler.pid_of(7, 63) in {p.pid for p in snap.processes}


def test_malformed_recordings_say_where_and_what(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "header", "inventory": {"gpus": []}}\nnot json\n')
    with pytest.raises(SampleSourceError, match=r"bad.jsonl:2: not JSON"):
        load_recording(bad)
    bad.write_text('{"kind": "sample", "t": 1, "gpus": [], "processes": []}\n')
    with pytest.raises(SampleSourceError, match=r"bad.jsonl:1: a sample before the header"):
        load_recording(bad)
    bad.write_text('{"kind": "header", "inventory": {"gpus": []}}\n{"kind": "sample", "gpus": [], "processes": []}\n')
    with pytest.raises(SampleSourceError, match=r"bad.jsonl:2: malformed sample line: KeyError"):
        load_recording(bad)
    with pytest.raises(SampleSourceError, match="cannot read NVML recording"):
        load_recording(tmp_path / "missing.jsonl.gz")
    with pytest.raises(SampleSourceError, match="at least 1 GPU"):
        ReplaySampler(load_recording(SHARE), gpus=0)
