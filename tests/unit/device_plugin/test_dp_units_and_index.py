"""Device IDs, the assignment index's matching rules, and the limits file."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair.v1 import common_pb2
from alnair_common import ConfigError, PermanentError, load_settings
from alnair_device_plugin import (
    Assignment,
    AssignmentIndex,
    DevicePluginSettings,
    InvalidDevicesError,
    NoAssignmentError,
    Resource,
    Workspaces,
    assignment_from_proto,
    open_source,
    parse_units,
    unit_id,
)
from alnair_gpu import SimulatedInventory

GPUS = SimulatedInventory.parse("sim:2x16").inventory()
A, B = GPUS.gpus[0].uuid, GPUS.gpus[1].uuid


def test_unit_ids_name_their_card_and_round_trip() -> None:
    ids = [unit_id(Resource.MEMORY, B, k) for k in (0, 15)]
    assert [(u.uuid, u.index) for u in parse_units(Resource.MEMORY, ids, GPUS)] == [(B, 0), (B, 15)]
    h200 = "GPU-f2b4712f-9931-af4b-7a24-58183960c4b7"
    assert len(unit_id(Resource.MEMORY, h200, 139)) <= 63


@pytest.mark.parametrize("bad", ["", "GPU-sim-0000-16g", f"{A}-m16", f"{A}-c1", f"{A}-mx", "GPU-x-m1"])
def test_unknown_ids_are_refused_with_the_expected_shape(bad: str) -> None:
    with pytest.raises(InvalidDevicesError, match="<GPU UUID>-m<unit>"):
        parse_units(Resource.MEMORY, [bad], GPUS)


def assignment(uid: str, card: str, memory: int, compute: int) -> Assignment:
    return Assignment(uid=uid, namespace="ml", name=uid, gpu_uuid=card, gpu_index=0, memory_gib=memory,
                      compute_percent=compute)


def test_match_prefers_the_container_half_allocated_then_bind_order(tmp_path: Path) -> None:
    index = AssignmentIndex(tmp_path)
    for uid, compute in (("p1", 30), ("p2", 30)):
        index.add(assignment(uid, A, 4, compute))
    # Identical limits: the oldest decision is used.
    assert index.match(Resource.MEMORY, A, 4).uid == "p1"
    index.record_allocation("p2", Resource.MEMORY, [unit_id(Resource.MEMORY, A, 0)])
    # p2's memory was just allocated, so its container's compute is p2's.
    assert index.match(Resource.COMPUTE, A, 30).uid == "p2"
    with pytest.raises(NoAssignmentError, match="none waiting on this card"):
        index.match(Resource.MEMORY, B, 4)


def test_index_survives_restart_and_ignores_late_decisions_for_ended_workloads(tmp_path: Path) -> None:
    index = AssignmentIndex(tmp_path)
    assert index.add(assignment("q1", A, 2, 0))
    assert not index.add(assignment("q1", A, 2, 0))  # redelivery
    index.record_allocation("q1", Resource.MEMORY, ["x"])
    index.end("q2")  # ended before its decision arrived
    again = AssignmentIndex(tmp_path)
    assert again.get("q1") is not None and again.get("q1").allocated == {"alnair/vgpu-memory": ["x"]}
    assert not again.add(assignment("q2", A, 2, 0))
    assert again.end("q1") is not None and AssignmentIndex(tmp_path).get("q1") is None


def test_limits_file_leaves_out_what_was_not_requested(tmp_path: Path) -> None:
    text = (Workspaces(tmp_path).create(assignment("w", A, 8, 0)) / "limits").read_text()
    assert f"memory_bytes = {8 << 30}" in text and "compute_percent" not in text
    assert "workload_id = ml/w" in text


@pytest.mark.parametrize(("uid", "memory", "compute", "match"), [
    ("", 1, 1, "uid is empty"),
    ("../etc", 1, 1, "is not a UID"),
    ("u", 0, 0, "neither memory_gib nor compute_percent"),
    ("u", 1, 250, "250 % is over 100 %"),
])
def test_bad_assignments_from_the_bus_are_permanent(uid: str, memory: int, compute: int, match: str) -> None:
    with pytest.raises(PermanentError, match=match):
        assignment_from_proto(common_pb2.WorkloadRef(uid=uid, name="p", namespace="ml"),
                              common_pb2.GpuAssignment(node="n", gpu_uuid=A, memory_gib=memory,
                                                       compute_percent=compute))


def test_gpu_source_setting_is_validated_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALNAIR_GPUS", "h200")
    with pytest.raises(ConfigError, match="ALNAIR_GPUS='h200'.*sim:<N>x<GiB>"):
        load_settings(DevicePluginSettings)
    monkeypatch.setenv("ALNAIR_GPUS", "sim:2x80")
    settings = load_settings(DevicePluginSettings)
    assert open_source(settings.gpus).inventory().simulated
    assert settings.state_dir.parent == settings.workspace_root  # one hostPath holds both


def test_a_new_decision_replaces_a_waiting_one_but_not_an_allocated_one(tmp_path: Path) -> None:
    index = AssignmentIndex(tmp_path)
    assert index.add(assignment("s1", A, 4, 10))
    assert index.add(assignment("s1", B, 4, 10))  # rescheduled to the other card before admission
    assert index.get("s1").gpu_uuid == B
    index.record_allocation("s1", Resource.MEMORY, [unit_id(Resource.MEMORY, B, 0)])
    assert not index.add(assignment("s1", A, 4, 10))
    assert index.get("s1").gpu_uuid == B


def test_only_the_last_allocated_container_is_preferred_for_its_other_resource(tmp_path: Path) -> None:
    index = AssignmentIndex(tmp_path)
    index.add(assignment("old", A, 4, 30))  # memory allocated long ago; its compute never came
    index.add(assignment("new", A, 2, 30))
    index.record_allocation("old", Resource.MEMORY, [unit_id(Resource.MEMORY, A, 0)])
    index.record_allocation("new", Resource.MEMORY, [unit_id(Resource.MEMORY, A, 1)])
    assert index.match(Resource.COMPUTE, A, 30).uid == "new"
    index.add(assignment("fresh", A, 1, 30))
    index.record_allocation("new", Resource.COMPUTE, [unit_id(Resource.COMPUTE, A, 0)])
    assert index.match(Resource.COMPUTE, A, 30).uid == "fresh"
