"""`scripts/gpu/e2e_share.py --sim` end to end: the real platform (`alnair up --gpus sim:1x80`,
every service, embedded NATS), the real CLI, CPU stand-ins instead of the PyTorch workloads.

What the GPU run does, minus the GPU: platform up and healthy, sequential and shared rounds
through `alnair run`, `alnair ps` / `/metrics` / `alnair events` while they share,
`alnair profile` afterwards, the memory-isolation round, the report, and a teardown that
leaves no process behind — also when the run is stopped by SIGTERM in the middle.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "gpu" / "e2e_share.py"
JOBS = ("cnn", "transformer", "inference", "dataload")
LIMITS = {"cnn": ("8", "40"), "transformer": ("8", "30"), "inference": ("4", "10"), "dataload": ("8", "20")}


def mentioning(path: Path) -> list[int]:
    """Live processes whose command line or environment names ``path`` (this run's data dir)."""
    needles = (f"{path}/".encode(), f"{path}\0".encode())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            blobs = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(n in blobs for n in needles):
            found.append(int(entry.name))
    return found


def kill_leftovers(data_dir: Path) -> list[int]:
    left = mentioning(data_dir)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def start(out: Path, data_dir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(SCRIPT), "--sim", "--out", str(out), "--data-dir", str(data_dir),
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)


@pytest.mark.timeout(180)
def test_sim_run_reports_every_section_and_leaves_nothing_behind(tmp_path: Path) -> None:
    out, data_dir = tmp_path / "out", tmp_path / "alnair"
    run = start(out, data_dir, "--reps", "1")
    try:
        console, _ = run.communicate(timeout=150)
    finally:
        if run.poll() is None:
            run.kill()
        leftovers = kill_leftovers(data_dir)
    assert run.returncode == 0, console[-3000:]
    assert leftovers == [], f"processes left behind: {leftovers}"

    report = (out / "report.md").read_text()
    for section in ("## Environment", "## Workloads", "## Rounds", "## Sharing gain", "## Per-job slowdown",
                    "## Memory isolation", "## During a shared round", "## Profiles", "## Files"):
        assert section in report, section
    assert "**SIMULATED RUN**" in report and "Status: **complete**" in report
    assert "Teardown: clean, nothing left running." in report
    assert re.search(r"^\| 1 \| \d+\.\d \| \d+\.\d \| -?\d+\.\d % \|$", report, re.M), "gain row"
    assert re.search(r"Gain \(less total time when sharing\): mean \*\*-?\d+\.\d %\*\*, min -?\d+\.\d %, "
                     r"max -?\d+\.\d % over 1 rep\(s\)\. Goal ≥ 40 %: \*\*(met|NOT met)\*\*", report)
    for job in JOBS:
        assert re.search(rf"^\| {job} \| \d+ \| \d+\.\d \| \d+\.\d \| \d+\.\d\dx \(\d+\.\d\d–\d+\.\d\d\) \| "
                         rf"[\d.]+x \| (yes|NO) \|$", report, re.M), f"slowdown row of {job}"
    assert ("inference-m1 (started 0.5 s after the others) asks for more than its limit: **refused by the "
            "stand-in (no GPU)**") in report
    assert "the other three **finished normally**. Verdict: **pass**" in report

    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete" and results["teardown"]["clean"]
    assert [r["id"] for r in results["rounds"]] == ["seq1", "shared1", "oom1"]
    seq, shared, oom = results["rounds"]
    for r in (seq, shared):
        assert r["ok"] and r["makespan_s"] > 0
        for job in JOBS:
            j = r["jobs"][job]
            assert j["exit"] == 0 and j["wall_s"] > 0 and j["iterations"] == 30 and j["work_s"] > 0
    assert all(seq["jobs"][j]["memory_gib"] == 80 and seq["jobs"][j]["compute_percent"] == 100 for j in JOBS)
    assert {j: (str(shared["jobs"][j]["memory_gib"]), str(shared["jobs"][j]["compute_percent"]))
            for j in JOBS} == LIMITS
    # Sequential: one after the other; shared: all four started together.
    assert seq["makespan_s"] >= sum(seq["jobs"][j]["wall_s"] for j in JOBS) * 0.99
    assert max(shared["jobs"][j]["started_at"] for j in JOBS) - min(shared["jobs"][j]["started_at"]
                                                                    for j in JOBS) < 2
    assert oom["oom"] == {"probe": "inference-m1", "caught": True, "others_ok": True, "ok": True}
    probe = oom["jobs"]["inference"]
    assert probe["exit"] == 42 and "caught OutOfMemoryError" in probe["oom_caught"]
    assert all(oom["jobs"][j]["exit"] == 0 for j in ("cnn", "transformer", "dataload"))

    # While they shared: `alnair ps` showed all four running on the card with their limits...
    rows = json.loads((out / "ps_shared.json").read_text())
    assert {r["name"]: (r["gib"], r["gpu %"]) for r in rows} == {f"{j}-s1": LIMITS[j] for j in JOBS}
    assert all(r["state"] == "running" and r["gpu"].endswith("(sim)") for r in rows)
    assert "cnn-s1" in (out / "ps_shared.txt").read_text()
    # ...the exporter's /metrics answered (one scrape kept, every scrape of the window parsed)...
    assert "alnair_exporter_samples_total" in (out / "metrics_scrape.txt").read_text()
    window = results["windows"]["shared1"]
    assert len(window["samples"]) >= 4 and not any("error" in s for s in window["samples"])
    assert set(window["summary"]) == {f"{j}-s1" for j in JOBS} | {"(device)"}
    assert (out / "utilisation.csv").read_text().startswith("t_seconds,workload,gpu_util_percent")
    # ...and `alnair events` saw each lifecycle, in order, without the submitters' environment.
    for job in JOBS:
        phases = [e["phase"] for e in results["lifecycle"][f"{job}-s1"]]
        assert phases == ["pending", "bound", "running", "succeeded"], phases
    assert [e.get("exit") for e in results["lifecycle"]["inference-m1"]][-1] == 42
    events = (out / "events.log").read_text()
    assert "alnair.workload.events WorkloadEvent" in events and "environment {" not in events
    assert results["event_counts"].get("alnair.metrics.gpu", 0) > 0
    # One profile per shared workload, read back with `alnair profile`.
    assert set(results["profiles"]) == {f"{j}-s1" for j in JOBS}
    for name, p in results["profiles"].items():
        assert p.get("phase") == "SUCCEEDED" and p.get("exit") == 0, (name, p)
        assert json.loads((out / "profiles" / f"{name}.json").read_text())["workloads"][0]["name"] == name
    assert {p.name for p in (out / "runs").iterdir()} == {f"{j}-{t}1.log" for j in JOBS for t in "asm"}
    assert (out / "logs" / "scheduler.log").exists() and (out / "logs" / "up.log").exists()


@pytest.mark.timeout(180)
def test_sigterm_mid_round_stops_everything_and_keeps_the_report(tmp_path: Path) -> None:
    out, data_dir = tmp_path / "out", tmp_path / "alnair"
    run = start(out, data_dir, "--reps", "2", "--skip-oom")
    try:
        deadline = time.monotonic() + 120
        while not (out / "runs" / "cnn-s1.log").exists():  # the shared round has begun
            assert run.poll() is None and time.monotonic() < deadline, "no shared round began"
            time.sleep(0.2)
        time.sleep(1.0)
        assert mentioning(data_dir), "workloads and platform should be running now"
        run.send_signal(signal.SIGTERM)
        console, _ = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
        leftovers = kill_leftovers(data_dir)
    assert run.returncode == 128 + signal.SIGTERM, console[-3000:]
    assert leftovers == [], f"processes left behind: {leftovers}"
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "interrupted (SIGTERM)" and results["teardown"]["clean"]
    assert results["rounds"][0]["id"] == "seq1" and results["rounds"][0]["ok"]
    report = (out / "report.md").read_text()
    assert "Status: **interrupted (SIGTERM)**" in report and "| seq1 |" in report
    assert "Teardown: clean, nothing left running." in report
