"""The recording grid (scripts/gpu/opendata_grid.py): what the two device commands record.
It must reach the issue's bar (>= 100 runs, six classes, alone and shared, limits 100/50/25),
be placeable (a slot's compute adds up to at most one card), split into parts that hold every
kind, and fit its time estimate into the device budget."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts" / "gpu"))
from opendata_grid import (  # noqa: E402
    CLASSES,
    HOST_BOUND,
    VARIANTS,
    WORK_S,
    full_grid,
    part_of,
    slot_estimate,
    tiny_grid,
)
from opendata_workloads import CLASSES as WORKLOAD_CLASSES  # noqa: E402
from opendata_workloads import options  # noqa: E402


def test_the_full_grid_reaches_the_issues_bar_and_every_slot_fits_one_card() -> None:
    slots = full_grid()
    runs = [r for s in slots for r in s.runs]
    assert len(runs) >= 100 and len({r.run_id for r in runs}) == len(runs)
    assert set(CLASSES) == set(WORKLOAD_CLASSES) and len(CLASSES) >= 6
    modes = Counter((r.config.workload, s.mode) for s in slots for r in s.runs)
    assert all(modes[(c, "alone")] >= 5 and modes[(c, "shared")] >= 6 for c in CLASSES), modes
    assert {r.compute_percent for s in slots if s.mode == "alone" for r in s.runs} == {100, 50, 25}
    assert all(sum(r.compute_percent for r in s.runs) <= 100 for s in slots)
    assert {r.config.params.get("precision", "fp32") for r in runs} == {"fp32", "bf16"}
    assert len({r.config.params.get("workers", 0) for r in runs if r.config.workload == "dataload_train"}) >= 3


def test_a_lower_limit_means_fewer_iterations_for_gpu_bound_classes_only() -> None:
    limited = {r.config.workload: r for s in full_grid() for r in s.runs
               if s.mode == "alone" and r.compute_percent == 25}
    base = {c: v[0] for c, v in VARIANTS.items()}
    for c, run in limited.items():
        assert run.config == base[c]  # limits and sharing use each class's base variant
        full = base[c].iterations(100)
        if c == "poisson_infer":
            assert run.config.iterations(25) == full == round(WORK_S * base[c].params["rate"])  # arrivals: fixed
        elif c in HOST_BOUND:
            assert run.config.iterations(25) == full
        else:
            assert run.config.iterations(25) == round(WORK_S * 1000 / base[c].ms / 4)
            assert full == round(WORK_S * 1000 / base[c].ms)


@pytest.mark.parametrize("parts", [2, 3])
def test_parts_cover_the_grid_once_each_holding_every_kind_within_the_budget(parts: int) -> None:
    slots = full_grid()
    split = [part_of(slots, k, parts) for k in range(1, parts + 1)]
    ids = sorted(r.run_id for p in split for s in p for r in s.runs)
    assert ids == sorted(r.run_id for s in slots for r in s.runs)
    for p in split:
        assert {s.mode for s in p} == {"alone", "shared"}
        assert {r.config.workload for s in p for r in s.runs} == set(CLASSES)
    if parts == 2:  # --deadline 450 a command: slots plus start-up (~15 s) and teardown (~20 s)
        assert all(sum(slot_estimate(s, sim=False) for s in p) + 35 <= 450 for p in split)
    with pytest.raises(ValueError, match="between 1 and N"):
        part_of(slots, parts + 1, parts)


def test_every_run_of_both_grids_is_a_valid_workload_command_line() -> None:
    for slot in [*full_grid(), *tiny_grid()]:
        for r in slot.runs:
            a = options(r.config.argv(r.compute_percent))
            assert a.workload == r.config.workload and a.iterations >= 1
    assert all(r.config.params["device"] == "cpu" for s in tiny_grid() for r in s.runs)
    with pytest.raises(SystemExit):
        options(["cnn_train", "--iterations", "0"])
