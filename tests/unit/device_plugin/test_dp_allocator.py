"""Allocator decisions without gRPC: preferred units, all-or-nothing Allocate."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair_device_plugin import (
    Allocator,
    Assignment,
    AssignmentIndex,
    ContainerPaths,
    NoAssignmentError,
    Resource,
    Workspaces,
    unit_id,
)
from alnair_gpu import SimulatedInventory

GPUS = SimulatedInventory.parse("sim:2x16").inventory()
A, B = GPUS.gpus[0].uuid, GPUS.gpus[1].uuid
M = Resource.MEMORY


def allocator(tmp_path: Path) -> Allocator:
    return Allocator(AssignmentIndex(tmp_path / "state"), Workspaces(tmp_path / "ws"),
                     ContainerPaths(interceptor_host=tmp_path / "lib.so"), gpus=lambda: GPUS)


def add(alloc: Allocator, uid: str, card: str, memory: int, compute: int = 0) -> None:
    alloc.index.add(Assignment(uid=uid, namespace="ml", name=uid, gpu_uuid=card, gpu_index=0, memory_gib=memory,
                               compute_percent=compute))


def units(card: str, indexes: range) -> list[str]:
    return [unit_id(M, card, k) for k in indexes]


def test_preferred_keeps_must_include_and_fills_from_the_assigned_card(tmp_path: Path) -> None:
    alloc = allocator(tmp_path)
    add(alloc, "p", B, 3)
    available = units(A, range(16)) + units(B, range(16))
    assert alloc.preferred(M, available, [unit_id(M, B, 9)], 3) == [unit_id(M, B, 9), unit_id(M, B, 0),
                                                                   unit_id(M, B, 1)]
    with pytest.raises(NoAssignmentError, match="fewer than 3 GiB free"):
        alloc.preferred(M, available, [unit_id(M, A, 0)], 3)
    with pytest.raises(NoAssignmentError, match="fewer than 3 GiB free among the 2 units"):
        alloc.preferred(M, units(B, range(2)), [], 3)


def test_preferred_refuses_when_waiting_pods_of_that_size_differ_in_limits(tmp_path: Path) -> None:
    alloc = allocator(tmp_path)
    add(alloc, "x", A, 4, 10)
    add(alloc, "y", B, 4, 90)
    with pytest.raises(NoAssignmentError, match="different limits"):
        alloc.preferred(M, units(A, range(16)) + units(B, range(16)), [], 4)


def test_allocate_is_all_or_nothing(tmp_path: Path) -> None:
    alloc = allocator(tmp_path)
    add(alloc, "ok", A, 2)
    with pytest.raises(NoAssignmentError):
        alloc.allocate(M, [units(A, range(2)), units(B, range(5))])
    # Nothing of the failed call stays: the first container's match is undone, no workspace left.
    assert alloc.index.get("ok") is not None and alloc.index.get("ok").allocated == {}
    assert alloc.workspaces.existing() == []
    (grant,) = alloc.allocate(M, [units(A, range(2))])
    assert grant.workload_uid == "ok" and alloc.workspaces.existing() == ["ok"]
