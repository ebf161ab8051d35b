"""The allocator bench runs, finishes every job and never allocates more than the cluster."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "services" / "elastic_job" / "bench" / "allocator_sim.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("allocator_sim", BENCH)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["allocator_sim"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    yield module
    del sys.modules["allocator_sim"]


@pytest.mark.parametrize("policy", ["static-min", "static-request", "elastic", "elastic-no-hyst"])
def test_every_policy_finishes_the_trace_within_the_cluster(sim, policy: str) -> None:
    jobs = sim.trace(7, 25)
    result = sim.simulate(jobs, policy)
    assert 0.0 < result["goodput"] <= result["allocated"] <= 1.0
    assert result["mean_jct_h"] > 0 and result["makespan_h"] >= max(j.arrival for j in jobs) / 3600
    assert (result["rescales"] == 0) == policy.startswith("static")


def test_the_trace_is_the_documented_mix(sim) -> None:
    jobs = sim.trace(0, 400)
    assert {j.lo for j in jobs} == {1, 2} and {j.hi // j.lo for j in jobs} == {2, 4}
    assert all(300.0 <= j.work <= 12 * 3600.0 and 0.0 <= j.serial <= 0.25 for j in jobs)
    gaps = [b.arrival - a.arrival for a, b in zip(jobs, jobs[1:], strict=False)]
    assert 300.0 < sum(gaps) / len(gaps) < 420.0, "Poisson, mean 6 min"
