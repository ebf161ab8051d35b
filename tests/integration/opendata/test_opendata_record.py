"""`scripts/gpu/opendata_record.py --sim` end to end: the real platform (`alnair up --gpus
sim:1x80`, every service, embedded NATS), real `alnair run` and `alnair profile`, the real
workloads of opendata_workloads.py on the CPU (`--device cpu`, tiny sizes).

What the GPU recording does, minus the GPU: runs alone and shared, a series file per run
as it ends and a summary row with every schema column, `--resume` recording only what is
missing, a refusal to append without it, and `alnair-opendata convert` + the loaders over
the result.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alnair_opendata import LABELS, SERIES_NAMES, SUMMARY_NAMES, convert, features, load_runs, load_series

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "gpu" / "opendata_record.py"
sys.path.insert(0, str(REPO / "scripts" / "gpu"))
from opendata_series import read_series  # noqa: E402


def record(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--sim", "--out", str(out), *extra], capture_output=True,
                          text=True, cwd=REPO, timeout=240)


def rows(out: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in map(json.loads, (out / "runs.jsonl").read_text().splitlines())}


@pytest.mark.timeout(420)
def test_sim_recording_alone_and_shared_then_resume_and_convert(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    done = record(out, "--only", "r001-cnn-c100,r007-cnn-c50s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = rows(out)
    assert set(got) == {"r001-cnn-c100", "r007-cnn-c50s", "r008-pinf-c50s"}
    for run_id, row in got.items():
        assert set(SUMMARY_NAMES) <= set(row), set(SUMMARY_NAMES) - set(row)
        assert row["exit_code"] == 0 and row["timed_out"] is False and row["iterations_done"] == row["iterations"]
        assert row["profile_evidence"], f"{run_id}: no profile read"
        series_file = out / "series" / f"{run_id}.csv.gz"
        with gzip.open(series_file, "rt") as f:
            assert tuple(f.readline().strip().split(",")) == SERIES_NAMES
        series = read_series(series_file)
        assert len(series) >= 3 and row["samples"] == len(series)
        assert series[-1]["iterations_total"] == row["iterations"]  # the truth file, counted
        assert max(r["cpu_seconds_total"] or 0 for r in series) > 0.5  # /proc of the tree: import torch alone
        assert features(series) == {k: row[k] for k in features(series)}
        assert (out / "profiles" / f"{run_id}.json").is_file()
    shared, alone = got["r007-cnn-c50s"], got["r001-cnn-c100"]
    assert (shared["mode"], shared["co_runner"], shared["co_runner_run_id"], shared["compute_percent"],
            shared["co_runner_compute_percent"]) == ("shared", "poisson_infer", "r008-pinf-c50s", 50, 50)
    assert (alone["mode"], alone["co_runner"], alone["workload"], alone["is_training"]) == \
        ("alone", "", "cnn_train", True)
    assert got["r008-pinf-c50s"]["is_training"] is False and got["r008-pinf-c50s"]["rate"] == 20.0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sim"] is True and meta["teardown"]["clean"] is True and meta["startup_s"] > 0
    assert "SIMULATED" in meta["environment"]["gpu"] and "cpu" in meta["environment"]["workload_torch"]

    again = record(out, "--only", "r001-cnn-c100")
    assert again.returncode == 2 and "--resume" in again.stderr  # never appends silently

    # As if cut off in the middle of the shared slot: one half recorded, its co-runner not.
    kept = [x for x in (out / "runs.jsonl").read_text().splitlines() if json.loads(x)["run_id"] != "r008-pinf-c50s"]
    (out / "runs.jsonl").write_text("\n".join(kept) + "\n")
    resumed = record(out, "--resume", "--only", "r001-cnn-c100,r004-pinf-c100,r007-cnn-c50s")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "2 slots, 3 runs to record" in resumed.stdout  # r001 skipped; the pair again, both halves
    lines = (out / "runs.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["run_id"] for x in lines) == ["r001-cnn-c100", "r004-pinf-c100", "r007-cnn-c50s",
                                                              "r008-pinf-c50s"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["grid_part"] == "rest" and meta["previous"]["grid_part"] == "all"
    assert any("r007-cnn-c50s recorded again" in n for n in meta["notes"])

    published = tmp_path / "published"
    summary = convert(out, published / "dry")
    assert summary["runs"] == 4
    runs = load_runs("dry", published)
    assert runs.column_names == list(SUMMARY_NAMES) and runs.num_rows == 4
    assert runs["co_runner"].to_pylist() == ["", "", "poisson_infer", "cnn_train"]
    s = load_series("r004-pinf-c100", "dry", published)
    assert s.column_names == ["run_id", *SERIES_NAMES] and s.num_rows == runs["samples"].to_pylist()[1]
    assert [c.name for c in LABELS][:3] == ["run_id", "part", "workload"]


@pytest.mark.timeout(300)
def test_deadline_stops_cleanly_keeping_every_finished_run(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    done = record(out, "--deadline", "75")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = rows(out)
    assert 1 <= len(got) < 10  # the tiny grid is 10 runs: not all fit in 75 s
    for run_id in got:
        assert (out / "series" / f"{run_id}.csv.gz").is_file()
    meta = json.loads((out / "meta.json").read_text())
    assert any("deadline" in n and "--resume" in n for n in meta["notes"]), meta["notes"]
    assert meta["teardown"]["clean"] is True and meta["elapsed_s"] < 75 + 60


@pytest.mark.timeout(300)
def test_sigterm_keeps_every_finished_run_and_stops_everything(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--sim", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 200
        while not list((out / "series").glob("*.csv.gz")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert list((out / "series").glob("*.csv.gz")), "no run finished within 200 s"
        proc.terminate()
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + 15, text[-2000:]
    finished = {p.name.removesuffix(".csv.gz") for p in (out / "series").glob("*.csv.gz")}
    assert finished <= set(rows(out)) and len(rows(out)) < 10  # its row even if the profile had not come
    meta = json.loads((out / "meta.json").read_text())
    assert any("interrupted by SIGTERM" in n for n in meta["notes"]) and meta["teardown"]["clean"] is True
