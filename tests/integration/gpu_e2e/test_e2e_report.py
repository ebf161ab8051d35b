"""The readings of `scripts/gpu/e2e_share.py` that the simulated run cannot exercise: per-workload
GPU series from an exporter scrape shaped like a real GPU node's (the sim card has none), and
the report's arithmetic (gain, slowdown against the 100/C bound, memory-isolation verdict)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts" / "gpu"))

from e2e_report import (  # noqa: E402
    gains,
    lifecycle_entry,
    parse_exposition,
    parse_ps_table,
    per_workload,
    redact,
    render_report,
    summarise_window,
)

GIB = 2**30
LABELS = 'pod_name="{}",namespace="local",node="h200",gpu_uuid="GPU-f2b4"'


def scrape(t: float) -> str:
    """Exposition text as the exporter writes it for two local workloads on one card."""
    lines = ["# HELP alnair_gpu_util SM utilisation of the pod's processes on this GPU, percent 0..100",
             "# TYPE alnair_gpu_util gauge"]
    for name, util, used in (("cnn-s1", 60.0, 3 * GIB), ("inference-s1", 5.0, GIB)):
        lab = LABELS.format(name)
        lines += [f"alnair_gpu_util{{{lab}}} {util + t}",
                  f"alnair_pod_gpu_memory_used_bytes{{{lab}}} {used + 500 * 2**20}",
                  f"alnair_cuda_memory_used_bytes{{{lab}}} {used}",
                  f"alnair_cuda_memory_limit_bytes{{{lab}}} {8 * GIB if name == 'cnn-s1' else 4 * GIB}",
                  f"alnair_cuda_compute_limit_ratio{{{lab}}} 0.4",
                  f"alnair_cuda_sm_utilization_ratio{{{lab}}} 0.35",
                  f"alnair_cuda_kernel_launches_total{{{lab}}} {1000 * t}",
                  f"alnair_cuda_throttled_seconds_total{{{lab}}} {0.1 * t}",
                  f'alnair_cuda_memcpy_bytes_total{{{lab},direction="htod"}} 300',
                  f'alnair_cuda_memcpy_bytes_total{{{lab},direction="dtoh"}} 100']
    lines += ['alnair_gpu_utilization_ratio{node="h200",gpu="0",gpu_uuid="GPU-f2b4",model_name="NVIDIA H200"} 0.7',
              'alnair_pod_cpu_seconds_total{pod_name="odd \\"name\\"",namespace="local",node="h200"} 3.5',
              "alnair_exporter_samples_total 12"]
    return "\n".join(lines) + "\n"


def test_scrape_gives_per_workload_utilisation_memory_against_limit_and_counters() -> None:
    samples = parse_exposition(scrape(0))
    assert ("alnair_pod_cpu_seconds_total", {"pod_name": 'odd \\"name\\"', "namespace": "local", "node": "h200"},
            3.5) in samples
    pods, device = per_workload(samples)
    assert device == {"device_util_ratio": 0.7}
    cnn = pods["cnn-s1"]
    assert cnn["gpu_util_percent"] == 60.0 and cnn["cuda_memory_limit_bytes"] == 8 * GIB
    assert cnn["memcpy_bytes_total"] == 400  # both directions
    window = [{"t": t, "pods": per_workload(parse_exposition(scrape(t)))[0],
               "device": {"device_util_ratio": 0.7}} for t in (0.5, 1.0, 1.5, 2.0, 9.0)]
    summary = summarise_window(window, {"cnn-s1": (0.0, 2.0), "inference-s1": (1.0, 9.0)})
    assert summary["cnn-s1"]["samples"] == 4  # 9.0 is after it ended
    assert summary["cnn-s1"]["gpu_util_max"] == 62.0 and summary["cnn-s1"]["memory_peak_bytes"] == 3 * GIB
    assert summary["cnn-s1"]["kernel_launches"] == 2000 and abs(summary["cnn-s1"]["throttled_s"] - 0.2) < 1e-9
    assert round(summary["cnn-s1"]["cuda_sm_util_mean"]) == 35
    assert summary["inference-s1"]["samples"] == 4 and summary["inference-s1"]["memory_limit_bytes"] == 4 * GIB
    assert summary["(device)"]["gpu_util_mean"] == 70.0


def test_ps_table_rows_and_event_lines() -> None:
    table = (
        "Alnair workloads\n"
        "┏━━━━━━━━┳━━━━━━━━━┳━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━┓\n"
        "┃ name   ┃ state   ┃ GiB ┃ GPU % ┃ message      ┃\n"
        "┡━━━━━━━━╇━━━━━━━━━╇━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━┩\n"
        "│ cnn-s1 │ running │ 8   │ 40    │ on GPU 0 and │\n"
        "│        │         │     │       │ more         │\n"
        "│ inf-s1 │ pending │ 4   │ 10    │              │\n"
        "└────────┴─────────┴─────┴───────┴──────────────┘\n")
    assert parse_ps_table(table) == [
        {"name": "cnn-s1", "state": "running", "gib": "8", "gpu %": "40", "message": "on GPU 0 and more"},
        {"name": "inf-s1", "state": "pending", "gib": "4", "gpu %": "10", "message": ""}]
    line = ('23:59:59.900 alnair.workload.events WorkloadEvent {workload { ref { uid: "ab12" name: "cnn-s1" '
            'namespace: "local" mode: MODE_LOCAL } phase: WORKLOAD_PHASE_FAILED exit_code: 42 } sequence: 4}')
    name, phase, at, code = lifecycle_entry(line, now=86400.0 * 20000 + 1.0)  # just after midnight UTC
    assert (name, phase, code) == ("cnn-s1", "failed", 42) and abs(at - (86400.0 * 20000 - 0.1)) < 1e-6
    assert lifecycle_entry("12:00:00.000 alnair.sched.bind BindDecision {}", 0.0) is None
    submit = ('12:00:00.000 alnair.workload.submit Workload {ref { name: "x" } environment { key: "TOKEN" '
              'value: "s3cr\\"et" } environment { key: "HOME" value: "/root" } working_dir: "/w"}')
    assert redact(submit) == '12:00:00.000 alnair.workload.submit Workload {ref { name: "x" } working_dir: "/w"}'


def job(name: str, wall: float, exit_code: int = 0, **more: object) -> dict[str, object]:
    return {"job": name, "workload": f"{name}-x", "wall_s": wall, "exit": exit_code, "work_s": wall / 2,
            "memory_gib": 8, "compute_percent": 50, "oom_caught": None, "no_oom": False, **more}


def test_report_gain_slowdown_bound_and_oom_verdict() -> None:
    results = {
        "status": "complete", "mode": "gpu", "elapsed_s": 300,
        "environment": {"date": "2026-11-30", "gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0",
                        "torch": "2.11.0", "commit": "abc"},
        "jobs": [{"name": "a", "command": "workloads.py a", "memory_gib": 8, "compute_percent": 50,
                  "slowdown_bound": 2.0},
                 {"name": "b", "command": "workloads.py b", "memory_gib": 8, "compute_percent": 50,
                  "slowdown_bound": 2.0}],
        "rounds": [
            {"id": "seq1", "kind": "seq", "rep": 1, "makespan_s": 100.0, "ok": True,
             "jobs": {"a": job("a", 50.0), "b": job("b", 50.0)}},
            {"id": "shared1", "kind": "shared", "rep": 1, "makespan_s": 40.0, "ok": True,
             "jobs": {"a": job("a", 40.0), "b": job("b", 30.0)}},
            {"id": "seq2", "kind": "seq", "rep": 2, "makespan_s": 100.0, "ok": True,
             "jobs": {"a": job("a", 20.0), "b": job("b", 80.0)}},
            {"id": "shared2", "kind": "shared", "rep": 2, "makespan_s": 70.0, "ok": True,
             "jobs": {"a": job("a", 50.0), "b": job("b", 70.0)}},
            {"id": "oom1", "kind": "oom", "rep": 1, "makespan_s": 10.0, "ok": None,
             "oom": {"probe": "b-m1", "caught": True, "others_ok": True, "ok": True},
             "jobs": {"a": job("a", 9.0), "b": job("b", 3.0, 42, workload="b-m1", delay_s=8.0,
                                                   oom_caught="E2E_OOM caught torch.OutOfMemoryError")}},
        ],
        "profiles": {}, "lifecycle": {}, "windows": {}, "notes": [], "event_counts": {},
    }
    pairs, slowdowns = gains(results)
    assert [round(p["gain"], 2) for p in pairs] == [0.6, 0.3]
    assert slowdowns == {"a": [0.8, 2.5], "b": [0.6, 0.875]}
    report = render_report(results)
    assert "| 1 | 100.0 | 40.0 | 60.0 % |" in report and "| 2 | 100.0 | 70.0 | 30.0 % |" in report
    assert "mean **45.0 %**, min 30.0 %, max 60.0 % over 2 rep(s). Goal ≥ 40 %: **met**" in report
    assert "| a | 50 | 35.0 | 45.0 | 1.65x (0.80–2.50) | 2x | NO |" in report  # 2.5 > 100/50
    assert "| b | 50 | 65.0 | 50.0 | 0.74x (0.60–0.88) | 2x | yes |" in report
    assert "b-m1 (started 8 s after the others) asks for more than its limit: **caught torch.OutOfMemoryError**" \
        in report
    assert "| b-m1 | 8 | - | 42 | E2E_OOM caught torch.OutOfMemoryError |" in report
    assert "| gpu | NVIDIA H200 |" in report and "SIMULATED" not in report
