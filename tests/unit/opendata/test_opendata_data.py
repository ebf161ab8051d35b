"""The committed open-dataset data through its loaders: every run and series reads, the
summary's features recompute from the series, bad requests get errors that say what to do,
and the analysis script makes its figures from it (and from a GPU-shaped dataset made here,
so the GPU branches run too)."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alnair_opendata import (
    DATA_ROOT,
    SERIES_NAMES,
    DatasetNotFoundError,
    RecordingError,
    SchemaMismatchError,
    convert,
    dataset_dir,
    features,
    load_runs,
    load_series,
)

REPO = Path(__file__).resolve().parents[3]
ANALYSIS = REPO / "scripts" / "opendata_analysis.py"
sys.path.insert(0, str(REPO / "scripts" / "gpu"))
from opendata_series import write_series  # noqa: E402


def close(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9,
                                                                                          abs_tol=1e-9))


PUBLISHED = sorted(p.name for p in DATA_ROOT.iterdir() if (p / "summary.csv").is_file())


@pytest.mark.parametrize("dataset", PUBLISHED)
def test_published_runs_load_with_labels_and_every_class(dataset: str) -> None:
    runs = load_runs(dataset)
    assert runs.num_rows >= (10 if dataset == "sim" else 100)
    assert set(runs["workload"].to_pylist()) == {"cnn_train", "lm_train", "batch_infer", "poisson_infer",
                                                 "dataload_train", "gnn_train"}
    assert set(runs["mode"].to_pylist()) == {"alone", "shared"}
    gpus = set(runs["gpu"].to_pylist())
    assert all("SIMULATED" in g for g in gpus) if dataset == "sim" else not any("SIMULATED" in g for g in gpus)
    for row in runs.to_pylist():
        s = load_series(row["run_id"], dataset)
        assert s.num_rows == row["samples"] and s["t_s"].to_pylist() == sorted(s["t_s"].to_pylist())


@pytest.mark.parametrize("dataset", PUBLISHED)
def test_summary_features_recompute_from_the_published_series(dataset: str) -> None:
    runs = load_runs(dataset).to_pylist()
    for row in random.Random(20).sample(runs, min(len(runs), 12)):
        got = features(load_series(row["run_id"], dataset).select(list(SERIES_NAMES)).to_pylist())
        wrong = {k: (v, row[k]) for k, v in got.items() if not close(v, row[k])}
        assert not wrong, f"{row['run_id']}: {wrong}"
        assert got["cpu_seconds"] and got["cpu_seconds"] > 0  # the host side is real even in the dry run


def test_unknown_dataset_run_or_recording_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="published here: .*sim"):
        load_runs("nope")
    with pytest.raises(DatasetNotFoundError, match="load_runs"):
        load_series("r999-none", "sim")
    with pytest.raises(RecordingError, match="no runs.jsonl"):
        convert(tmp_path, tmp_path / "out")
    broken = tmp_path / "broken"
    shutil.copytree(dataset_dir("sim"), broken / "sim")
    text = (broken / "sim" / "summary.csv").read_text().replace("throughput_per_second", "throughput", 1)
    (broken / "sim" / "summary.csv").write_text(text)
    with pytest.raises(SchemaMismatchError, match="missing \\['throughput_per_second'\\]"):
        load_runs("sim", broken)


def gpu_shaped_recording(where: Path) -> None:
    """A recorder's --out directory with GPU-like series (made here, for the analysis' GPU
    branches; not data): every class alone at 100 and 50 %, and cnn_train + lm_train at 50/50."""
    rng = random.Random(1)
    (where / "series").mkdir(parents=True)
    classes = ["cnn_train", "lm_train", "batch_infer", "poisson_infer", "dataload_train", "gnn_train"]
    lines = []
    n = 0
    pair = {"r013-x-c50s": ("cnn_train", "lm_train", "r014-x-c50s"), "r014-x-c50s": ("lm_train", "cnn_train",
                                                                                  "r013-x-c50s")}
    for compute, group in ((100, classes), (50, classes), (50, ["cnn_train", "lm_train"])):
        for c in group:
            n += 1
            rows, launches, copied, cpu, it = [], 0.0, 0.0, 0.0, 0.0
            level = 0.9 if c.endswith("train") else 0.2
            for t in range(15):
                busy = t >= 3
                launches += 4000 * busy
                copied += 1e6 * busy
                cpu += 1.2
                it += 40 * busy * compute / 100
                rows.append({"t_s": t + 0.5, "gpu_util_ratio": (level + rng.uniform(-0.05, 0.05)) * busy,
                             "gpu_memory_bytes": (2 + 0.1 * min(t, 5)) * 2**30, "kernel_launches_total": launches,
                             "memcpy_htod_bytes_total": copied, "memcpy_dtoh_bytes_total": copied / 100,
                             "throttled_seconds_total": 0.3 * t * (compute < 100), "power_watts": 300 + 100 * busy,
                             "cuda_launch_period_seconds": 0.01 * busy, "cpu_seconds_total": cpu,
                             "iterations_total": it})
            run_id = f"r{n:03d}-x-c{compute}" + ("s" if n > 12 else "")
            co = pair.get(run_id, ("", "", ""))
            write_series(where / "series" / f"{run_id}.csv.gz", SERIES_NAMES, rows)
            lines.append({"run_id": run_id, "part": "synthetic", "workload": c, "is_training": c.endswith("train"),
                          "batch": 64, "width": 64, "layers": 2, "precision": "fp32", "workers": 0, "rate": 0.0,
                          "iterations": 480, "compute_percent": compute, "memory_gib": 24,
                          "mode": "shared" if co[0] else "alone", "co_runner": co[1], "co_runner_run_id": co[2],
                          "co_runner_compute_percent": 50 if co[0] else 0, "gpu": "SYNTHETIC (test)", "exit_code": 0,
                          "timed_out": False, "wall_s": 15.0, "setup_s": 3.0, "work_s": 12.0, "iterations_done": 480,
                          "torch_peak_bytes": 2e9, "profile_is_training": c.endswith("train"),
                          "profile_period_s": 0.0, "profile_confidence": 0.5, "profile_evidence": "nvml",
                          "profile_predicted_peak_bytes": 2.5 * 2**30, "profile_gpu_util_max": level,
                          "profile_gpu_memory_max": 2.5 * 2**30, **features(rows)})
    (where / "runs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (where / "meta.json").write_text(json.dumps({"grid_part": "synthetic", "environment": {"gpu": "SYNTHETIC"}}))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("dataset", ["sim", "gpu-shaped"])
def test_analysis_script_makes_its_figures_and_numbers(tmp_path: Path, dataset: str) -> None:
    extra: list[str] = []
    if dataset == "gpu-shaped":
        gpu_shaped_recording(tmp_path / "rec")
        convert(tmp_path / "rec", tmp_path / "data" / dataset)
        extra = ["--root", str(tmp_path / "data")]
    out = tmp_path / "figures"
    done = subprocess.run([sys.executable, str(ANALYSIS), "--dataset", dataset, "--out", str(out), *extra],
                          capture_output=True, text=True, cwd=REPO, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("classes.png", "traces.png", "sharing.png", "interference.png", "profiler.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    text = (out / "results.md").read_text()
    assert "| cnn_train |" in text and "Training detection, test runs" in text
    if dataset == "sim":
        assert "No GPU series in this dataset" in text
    else:
        assert "No GPU series" not in text
        assert "| cnn_train | 1 | 0.71 | 0.93 | 3429 | 10.0 |" in text  # 12 busy seconds of 15 at ~0.9; launches
        assert "alone 50%" in text  # the limited runs' relative throughput: 0.50 by construction
        assert "| cnn_train | 0.50 | 0.50 |" in text  # alone 50 %, shared 50/50: the limit, by construction
        assert "| cnn_train | - | 1.00 |" in text  # beside lm_train: nothing beyond the limit


def test_update_docs_refuses_the_dry_run() -> None:
    done = subprocess.run([sys.executable, str(ANALYSIS), "--dataset", "sim", "--update-docs"], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and "never presented as H200 data" in done.stderr


def test_convert_takes_a_resumed_copy_once_and_refuses_conflicting_runs(tmp_path: Path) -> None:
    gpu_shaped_recording(tmp_path / "part1")
    shutil.copytree(tmp_path / "part1", tmp_path / "part2")  # --resume into a copy: part 1's runs again
    assert convert([tmp_path / "part1", tmp_path / "part2"], tmp_path / "out" / "x")["runs"] == 14
    lines = (tmp_path / "part2" / "runs.jsonl").read_text().splitlines()
    changed = json.loads(lines[0]) | {"exit_code": 1}
    (tmp_path / "part2" / "runs.jsonl").write_text("\n".join([json.dumps(changed), *lines[1:]]) + "\n")
    with pytest.raises(RecordingError, match="r001-x-c100.*different results"):
        convert([tmp_path / "part1", tmp_path / "part2"], tmp_path / "out" / "y")


def test_update_docs_fills_the_markers_with_the_results_and_keeps_the_rest(tmp_path: Path) -> None:
    gpu_shaped_recording(tmp_path / "rec")
    convert(tmp_path / "rec", tmp_path / "data" / "h200")
    doc = tmp_path / "docs" / "open-dataset.md"
    doc.parent.mkdir()
    shutil.copy(REPO / "docs" / "open-dataset.md", doc)
    before = doc.read_text()
    done = subprocess.run([sys.executable, str(ANALYSIS), "--dataset", "h200", "--root", str(tmp_path / "data"),
                           "--update-docs", "--doc", str(doc)], capture_output=True, text=True, cwd=REPO, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    after = doc.read_text()
    head, tail = before.split("<!-- results:begin", 1)[0], before.split("<!-- results:end -->", 1)[1]
    assert after.startswith(head) and after.endswith(tail) and "Not recorded yet" not in after
    assert "Dataset **h200**: 14 runs" in after and "![classes](images/open-dataset/classes.png)" in after
    assert (doc.parent / "images" / "open-dataset" / "interference.png").is_file()
