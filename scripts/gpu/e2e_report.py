"""The end-to-end demonstration's readings and its report (used by ``e2e_share.py``).

Pure functions over what the run recorded: the exporter's ``/metrics`` text, ``alnair
events`` and ``alnair ps`` lines, ``alnair profile --json`` documents, and the results
dictionary ``e2e_share.py`` keeps (and saves as ``results.json``), rendered into
``report.md``, ``utilisation.csv`` and, matplotlib permitting, ``utilisation.png``.
Standard library only (matplotlib optional).
"""

from __future__ import annotations

import csv
import re
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from e2e_workloads import Job

SAMPLE_PERIOD_S = 0.5
PS_PERIOD_S = 1.5

POD_METRICS = {
    "alnair_gpu_util": "gpu_util_percent",
    "alnair_pod_gpu_memory_used_bytes": "pod_gpu_memory_bytes",
    "alnair_cuda_memory_used_bytes": "cuda_memory_used_bytes",
    "alnair_cuda_memory_limit_bytes": "cuda_memory_limit_bytes",
    "alnair_cuda_compute_limit_ratio": "cuda_compute_limit_ratio",
    "alnair_cuda_sm_utilization_ratio": "cuda_sm_utilization_ratio",
    "alnair_cuda_kernel_launches_total": "kernel_launches_total",
    "alnair_cuda_throttled_seconds_total": "throttled_seconds_total",
    "alnair_cuda_memcpy_bytes_total": "memcpy_bytes_total",
    "alnair_cuda_launch_period_seconds": "launch_period_seconds",
}
DEVICE_METRICS = {"alnair_gpu_utilization_ratio": "device_util_ratio",
                  "alnair_gpu_memory_used_bytes": "device_memory_used_bytes"}


# --- /metrics -----------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: (name, labels, value); comments skipped."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or line.startswith("#"):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def per_workload(samples: list[tuple[str, dict[str, str], float]]) -> tuple[dict[str, dict[str, float]],
                                                                            dict[str, float]]:
    """Per-workload values (summed over cards and copy directions) and device values (mean over cards)."""
    pods: dict[str, dict[str, float]] = {}
    device: dict[str, list[float]] = {}
    for name, labels, value in samples:
        if name in POD_METRICS and "pod_name" in labels:
            key = POD_METRICS[name]
            values = pods.setdefault(labels["pod_name"], {})
            values[key] = values.get(key, 0.0) + value
        elif name in DEVICE_METRICS:
            device.setdefault(DEVICE_METRICS[name], []).append(value)
    return pods, {k: statistics.fmean(v) for k, v in device.items()}


def parse_ps_table(text: str) -> list[dict[str, str]]:
    """Rows of `alnair ps`'s table (box-drawn by rich): one dict per workload, keyed by the
    header's column names; a cell wrapped over several lines is joined."""
    head: list[str] = []
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if line.startswith("┃"):
            head = [c.strip().lower() for c in line.strip().strip("┃").split("┃")]
        elif line.startswith("│") and head:
            cells = [c.strip() for c in line.strip().strip("│").split("│")]
            if len(cells) != len(head):
                continue
            if cells[0]:
                rows.append(dict(zip(head, cells, strict=True)))
            elif rows:
                for key, cell in zip(head, cells, strict=True):
                    if cell:
                        rows[-1][key] = f"{rows[-1][key]} {cell}".strip()
    return rows


# --- lifecycle from `alnair events` ------------------------------------------------------------

_EVENT_NAME = re.compile(r'ref \{ uid: "[^"]*" name: "([^"]+)"')
_EVENT_PHASE = re.compile(r"phase: WORKLOAD_PHASE_([A-Z]+)")
_EVENT_EXIT = re.compile(r"exit_code: (-?\d+)")
_ENVIRONMENT = re.compile(r' ?environment \{ key: "(?:[^"\\]|\\.)*" value: "(?:[^"\\]|\\.)*" \}')


def redact(line: str) -> str:
    """Older `alnair run` clients sent the submitter's environment with each submission (it now
    goes through the workspace): keep any such copy out of the report."""
    return _ENVIRONMENT.sub("", line)


def lifecycle_entry(line: str, now: float) -> tuple[str, str, float, int | None] | None:
    """(workload, phase, time, exit code) of one ``alnair.workload.events`` line of `alnair events`."""
    parts = line.split(" ", 2)
    if len(parts) < 3 or parts[1] != "alnair.workload.events":
        return None
    name, phase = _EVENT_NAME.search(line), _EVENT_PHASE.search(line)
    if not name or not phase:
        return None
    exit_code = _EVENT_EXIT.search(line)
    return name.group(1), phase.group(1).lower(), _clock_to_epoch(parts[0], now), \
        int(exit_code.group(1)) if exit_code else None


def _clock_to_epoch(hms: str, now: float) -> float:
    """`alnair events` stamps lines HH:MM:SS.mmm (UTC): the moment of that name closest to ``now``."""
    try:
        clock = datetime.strptime(hms, "%H:%M:%S.%f").time()
    except ValueError:
        return now
    today = datetime.fromtimestamp(now, UTC).date()
    candidates = [datetime.combine(today + timedelta(days=d), clock, UTC).timestamp() for d in (-1, 0, 1)]
    return min(candidates, key=lambda t: abs(t - now))


# --- summaries ----------------------------------------------------------------------------------

def job_record(job: Job, sim: bool, scale: float) -> dict[str, Any]:
    argv = job.argv("python", sim=sim, scale=scale)
    return {"name": job.name, "command": " ".join([Path(argv[1]).name, *argv[2:]]), "memory_gib": job.memory_gib,
            "compute_percent": job.compute_percent, "slowdown_bound": round(100 / job.compute_percent, 2),
            "oom_alloc_gib": job.oom_alloc_gib}


def summarise_window(samples: list[dict[str, Any]], spans: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Per workload, over the samples taken while it ran: utilisation, memory against limit, counters."""
    out: dict[str, Any] = {}
    for name, (start, end) in spans.items():
        rows = [s["pods"][name] for s in samples if "pods" in s and name in s["pods"] and start <= s["t"] <= end]
        util = [r["gpu_util_percent"] for r in rows if "gpu_util_percent" in r]
        sm = [r["cuda_sm_utilization_ratio"] * 100 for r in rows if "cuda_sm_utilization_ratio" in r]
        used = [r.get("cuda_memory_used_bytes", r.get("pod_gpu_memory_bytes", 0.0)) for r in rows]
        limit = [r["cuda_memory_limit_bytes"] for r in rows if "cuda_memory_limit_bytes" in r]
        last = rows[-1] if rows else {}
        out[name] = {"samples": len(rows), "gpu_util_max": max(util, default=None),
                     "gpu_util_mean": statistics.fmean(util) if util else None,
                     "cuda_sm_util_mean": statistics.fmean(sm) if sm else None,
                     "memory_peak_bytes": max(used, default=None), "memory_limit_bytes": max(limit, default=None),
                     "kernel_launches": last.get("kernel_launches_total"),
                     "throttled_s": last.get("throttled_seconds_total"),
                     "memcpy_bytes": last.get("memcpy_bytes_total"),
                     "launch_period_s": last.get("launch_period_seconds")}
    device = [s["device"].get("device_util_ratio") for s in samples if "device" in s]
    device = [d * 100 for d in device if d is not None]
    out["(device)"] = {"samples": len(device), "gpu_util_max": max(device, default=None),
                       "gpu_util_mean": statistics.fmean(device) if device else None}
    return out


def profile_summary(doc: dict[str, Any]) -> dict[str, Any]:
    series = doc.get("series") or {}
    t = doc.get("training") or {}

    def pick(name: str) -> dict[str, Any]:
        s = series.get(name) or {}
        d = s.get("deciles") or []
        return {"max": s.get("max"), "p50": d[4] if len(d) > 4 else None, "p90": d[8] if len(d) > 8 else None,
                "samples": s.get("samples", 0)}

    return {"phase": doc.get("phase"), "exit": doc.get("exit_code"), "is_training": t.get("is_training"),
            "period_s": t.get("period_seconds"), "confidence": t.get("confidence"), "evidence": t.get("evidence"),
            "reason": t.get("reason"), "gpu_util": pick("gpu_utilization_ratio"),
            "gpu_memory": pick("gpu_memory_bytes"), "cpu_cores": pick("cpu_cores"),
            "predicted_peak_gpu_memory_bytes": doc.get("predicted_peak_gpu_memory_bytes")}


def write_plot(out: Path, window: dict[str, Any], results: dict[str, Any]) -> None:
    """utilisation.csv always; utilisation.png where matplotlib can be imported."""
    rows = []
    for s in window["samples"]:
        for name, v in (s.get("pods") or {}).items():
            start, end = window["spans"].get(name, (0, 1e9))
            if start <= s["t"] <= end:
                rows.append([round(s["t"], 2), name, v.get("gpu_util_percent"),
                             _pct(v.get("cuda_sm_utilization_ratio")),
                             v.get("cuda_memory_used_bytes", v.get("pod_gpu_memory_bytes")),
                             v.get("cuda_memory_limit_bytes"), v.get("kernel_launches_total"),
                             v.get("throttled_seconds_total")])
        if "device" in s:
            rows.append([round(s["t"], 2), "(device)", _pct(s["device"].get("device_util_ratio")), None,
                         s["device"].get("device_memory_used_bytes"), None, None, None])
    with open(out / "utilisation.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_seconds", "workload", "gpu_util_percent", "cuda_sm_util_percent", "memory_used_bytes",
                    "memory_limit_bytes", "kernel_launches_total", "throttled_seconds_total"])
        w.writerows(rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        results["plot"] = "matplotlib not importable: the plot's data is utilisation.csv"
        return
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    names = sorted({r[1] for r in rows if r[1] != "(device)"})
    for name in [*names, "(device)"]:
        mine = [r for r in rows if r[1] == name and r[2] is not None]
        style = {"color": "black", "linestyle": "--"} if name == "(device)" else {}
        top.plot([r[0] for r in mine], [r[2] for r in mine], label=name, **style)
        mem = [r for r in rows if r[1] == name and r[4] is not None and name != "(device)"]
        if mem:
            line = bottom.plot([r[0] for r in mem], [r[4] / 2**30 for r in mem], label=f"{name} used")[0]
            lim = [r for r in mem if r[5]]
            if lim:
                bottom.plot([r[0] for r in lim], [r[5] / 2**30 for r in lim], linestyle=":", color=line.get_color())
    top.set_ylabel("GPU utilisation, % (NVML per process)")
    top.set_title(f"Four workloads sharing one GPU under Alnair ({window['round']}); dashed: whole device")
    top.legend(loc="upper right", fontsize=8)
    bottom.set_ylabel("GPU memory, GiB (dotted: limit)")
    bottom.set_xlabel("seconds since the round started")
    bottom.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "utilisation.png", dpi=110)
    plt.close(fig)
    results["plot"] = "utilisation.png (data: utilisation.csv)"


def _gib(value: float | None) -> str:
    return "-" if not value else f"{value / 2**30:.2f}"


def _pct(ratio: float | None) -> float | None:
    return None if ratio is None else ratio * 100


# --- the report -----------------------------------------------------------------------------------

def _f(value: Any, fmt: str = "{:.1f}", none: str = "-") -> str:
    return none if value is None else fmt.format(value)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def gains(results: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """Per rep with both rounds ok: makespans and gain; per job: its slowdowns (shared / alone)."""
    by = {(r["kind"], r["rep"]): r for r in results["rounds"]}
    pairs, slowdowns = [], {}
    for (kind, rep), shared in sorted(by.items(), key=lambda kv: kv[0][1]):
        seq = by.get(("seq", rep))
        if kind != "shared" or seq is None or not (seq["ok"] and shared["ok"]):
            continue
        pairs.append({"rep": rep, "seq_s": seq["makespan_s"], "shared_s": shared["makespan_s"],
                      "gain": 1 - shared["makespan_s"] / seq["makespan_s"]})
        for name, job in shared["jobs"].items():
            alone = seq["jobs"].get(name, {}).get("wall_s")
            if alone and job.get("wall_s"):
                slowdowns.setdefault(name, []).append(job["wall_s"] / alone)
    return pairs, slowdowns


def render_report(r: dict[str, Any]) -> str:
    env = r.get("environment", {})
    sim = r.get("mode") == "sim"
    lines = ["# Alnair end to end: four workloads sharing one GPU", ""]
    if sim:
        lines += ["**SIMULATED RUN** (`--sim`): a simulated card and CPU stand-ins of the workloads — this checks "
                  "the orchestration only; none of its numbers say anything about a GPU.", ""]
    lines += [f"Status: **{r.get('status')}** after {r.get('elapsed_s', 0):.0f} s; sharing mode: "
              f"**{r.get('sharing_mode', 'time-slicing')}**.", ""]
    lines += ["## Environment", ""]
    lines += _table(["what", "value"], [[k, str(env.get(k, "?"))] for k in
                                        ("date", "gpu", "driver", "cuda", "torch", "torch_cuda", "python",
                                         "commit", "host_cpus") if k in env])
    p = r.get("platform") or {}
    if p:
        lines += ["", f"Platform: `alnair up` healthy after {p.get('healthy_after_s')} s "
                      f"({', '.join(p.get('services', []))}); GPUs: {p.get('gpus')}; interceptor: "
                      f"{p.get('interceptor') or 'none'}; exporter at {p.get('metrics_url')}."]
    lines += ["", "## Workloads", "",
              "Each does a fixed amount of work. *Shared*: all four at once with the limits below "
              "(compute adds up to 100 %). *Alone* (sequential baseline): one after the other through "
              "`alnair run --gpu-compute 100 --gpu-memory <whole card>`, interceptor loaded, nothing limited. "
              "A job limited to C % may take up to 100/C times its alone time (the bound).", ""]
    lines += _table(["job", "command", "GiB", "compute %", "bound (100/C)"],
                    [[j["name"], f"`{j['command']}`", str(j["memory_gib"]), str(j["compute_percent"]),
                      f"{j['slowdown_bound']:g}x"] for j in r.get("jobs", [])])
    rounds = r.get("rounds", [])
    names = [j["name"] for j in r.get("jobs", [])]
    lines += ["", "## Rounds", "", "Completion time of each job (wall time of its `alnair run`, CLI start-up "
              "included) and of the set (first start to last end); work = its own first to last iteration.", ""]
    lines += _table(["round", "makespan s", *[f"{n} s (work s, exit)" for n in names], "ok"],
                    [[x["id"], _f(x["makespan_s"]),
                      *[f"{_f(x['jobs'].get(n, {}).get('wall_s'))} ({_f(x['jobs'].get(n, {}).get('work_s'))}, "
                        f"{x['jobs'].get(n, {}).get('exit')})" for n in names],
                      {True: "yes", False: "NO", None: "(oom round)"}[x["ok"]]] for x in rounds])
    pairs, slowdowns = gains(r)
    lines += ["", "## Sharing gain", ""]
    if pairs:
        lines += _table(["rep", "sequential s", "shared s", "gain"],
                        [[str(x["rep"]), _f(x["seq_s"]), _f(x["shared_s"]), f"{x['gain'] * 100:.1f} %"] for x in pairs])
        g = [x["gain"] * 100 for x in pairs]
        verdict = "met" if statistics.fmean(g) >= 40 else "NOT met"
        lines += ["", f"Gain (less total time when sharing): mean **{statistics.fmean(g):.1f} %**, min {min(g):.1f} %, "
                      f"max {max(g):.1f} % over {len(g)} rep(s). Goal ≥ 40 %: **{verdict}**."]
    else:
        lines += ["No rep with both a sequential and a shared round that succeeded: no gain to report."]
    lines += ["", "## Per-job slowdown", "", "Shared completion time / alone completion time, same rep; within "
              "bound when every rep's slowdown is at most 100/C.", ""]
    rows = []
    for j in r.get("jobs", []):
        s = slowdowns.get(j["name"])
        if not s:
            rows.append([j["name"], str(j["compute_percent"]), "-", "-", "-", f"{j['slowdown_bound']:g}x", "-"])
            continue
        alone = [x["jobs"][j["name"]]["wall_s"] for x in rounds if x["kind"] == "seq" and x["ok"]]
        shared = [x["jobs"][j["name"]]["wall_s"] for x in rounds if x["kind"] == "shared" and x["ok"]]
        within = "yes" if max(s) <= j["slowdown_bound"] else "NO"
        rows.append([j["name"], str(j["compute_percent"]), _f(statistics.fmean(alone)), _f(statistics.fmean(shared)),
                     f"{statistics.fmean(s):.2f}x ({min(s):.2f}–{max(s):.2f})", f"{j['slowdown_bound']:g}x", within])
    lines += _table(["job", "compute %", "alone s (mean)", "shared s (mean)", "slowdown mean (min–max)", "bound",
                     "within bound"], rows)
    lines += ["", "## Memory isolation", ""]
    ooms = [x for x in rounds if x["kind"] == "oom"]
    if not ooms:
        lines += ["Not run (yet)."]
    refused = "refused by the stand-in (no GPU)" if sim else "caught torch.OutOfMemoryError"
    for x in ooms:
        v = x["oom"]
        seen = (r.get("windows", {}).get(x["id"]) or {}).get("summary", {})
        delay = next((j.get("delay_s") for j in x["jobs"].values() if j["workload"] == v["probe"]), None)
        lines += [f"Round {x['id']}: {v['probe']} (started {_f(delay, '{:g}')} s after the others) asks for more "
                  "than its limit: "
                  f"**{refused if v['caught'] else 'NOT refused as expected'}**; the other "
                  f"three **{'finished normally' if v['others_ok'] else 'did NOT all finish normally'}**. "
                  f"Verdict: **{'pass' if v['ok'] else 'FAIL'}**.", ""]
        lines += _table(["workload", "GiB limit", "peak GiB seen by the exporter", "exit", "what it said"],
                        [[j["workload"], str(j["memory_gib"]),
                          _gib(seen.get(j["workload"], {}).get("memory_peak_bytes")), str(j["exit"]),
                          (j["oom_caught"] or ("allocation granted (no OOM)" if j["no_oom"] else "finished")
                           ).replace("|", "/")[:160]] for j in x["jobs"].values()])
        lines += [""]
    lines += _window_section(r)
    lines += ["", "## Profiles", "", "`alnair profile NAME` of each workload of the first shared round "
              "(raw: `profiles/NAME.json`). Utilisation in %, memory in GiB.", ""]
    prow = []
    for name, s in r.get("profiles", {}).items():
        if "error" in s:
            prow.append([name, "error: " + s["error"].replace("|", "/").replace("\n", " ")[:120], *["-"] * 7])
            continue
        u, m = s["gpu_util"], s["gpu_memory"]
        prow.append([name, f"{'training' if s['is_training'] else 'not training'} ({_f(s['confidence'], '{:.2f}')}, "
                           f"{s['evidence'] or '-'})",
                     _f(s["period_s"] * 1e3 if s["period_s"] else None, "{:.1f} ms", "unresolved"),
                     _f(_pct(u["max"]), "{:.0f}"), _f(_pct(u["p50"]), "{:.0f}"), _f(_pct(u["p90"]), "{:.0f}"),
                     _f(m["max"] / 2**30 if m["max"] else None, "{:.2f}"),
                     _f(s["predicted_peak_gpu_memory_bytes"] / 2**30 if s["predicted_peak_gpu_memory_bytes"] else None,
                        "{:.2f}"), str(u["samples"])])
    lines += _table(["workload", "job type", "period", "util max", "p50", "p90", "memory max", "predicted peak",
                     "samples"], prow) if prow else ["Not read (yet)."]
    counts = r.get("event_counts", {})
    lines += ["", "## Files", "",
              "`results.json` (everything, raw samples included), `events.log` (`alnair events`, metrics "
              f"samples counted not kept: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}), "
              "`status.json`, `ps_shared.txt`/`.json`, `metrics_scrape.txt`, `utilisation.csv`"
              f"{', `utilisation.png`' if r.get('plot', '').startswith('utilisation.png') else ''}, `profiles/`, "
              "`runs/` (each `alnair run`'s output), `logs/` (the platform's)."]
    if r.get("plot") and not r["plot"].startswith("utilisation.png"):
        lines += ["", f"Plot: {r['plot']}."]
    td = r.get("teardown")
    if td:
        killed = td["left_behind_then_killed"]
        lines += ["", f"Teardown: {'clean, nothing left running' if td['clean'] else 'NOT clean'}"
                      f"{'; leftovers stopped: ' + str(killed) if killed else ''}."]
    if r.get("notes"):
        lines += ["", "## Notes", "", *[f"* {n}" for n in r["notes"]]]
    return "\n".join(lines) + "\n"


def _window_section(r: dict[str, Any]) -> list[str]:
    windows = [w for k, w in r.get("windows", {}).items() if k.startswith("shared")]
    if not windows:
        return []
    w = windows[0]
    lines = ["## During a shared round", "",
             f"Round {w['round']}: `/metrics` scraped every {SAMPLE_PERIOD_S:g} s ({len(w['samples'])} scrapes; "
             "one saved as `metrics_scrape.txt`); `alnair ps` sampled every "
             f"{PS_PERIOD_S:g} s ({len(w['ps'])} samples). GPU utilisation is NVML's per-process figure "
             "(`alnair_gpu_util`), which shows activity rather than a share when processes time-slice; "
             "the interceptor's own SM measurement and its throttling are next to it.", ""]
    rows = []
    for name, s in w["summary"].items():
        if name == "(device)":
            rows.append([name, str(s["samples"]), _f(s["gpu_util_max"], "{:.0f}"), _f(s["gpu_util_mean"], "{:.0f}"),
                         *["-"] * 5])
            continue
        rows.append([name, str(s["samples"]), _f(s["gpu_util_max"], "{:.0f}"), _f(s["gpu_util_mean"], "{:.0f}"),
                     _f(s["cuda_sm_util_mean"], "{:.0f}"),
                     f"{_f(s['memory_peak_bytes'] / 2**30 if s['memory_peak_bytes'] else None, '{:.2f}')} / "
                     f"{_f(s['memory_limit_bytes'] / 2**30 if s['memory_limit_bytes'] else None, '{:.0f}')}",
                     _f(s["kernel_launches"], "{:.0f}"), _f(s["throttled_s"], "{:.1f}"),
                     _f(s["launch_period_s"] * 1e3 if s["launch_period_s"] else None, "{:.1f}")])
    lines += _table(["workload", "scrapes", "util max %", "util mean %", "interceptor SM mean %",
                     "memory peak / limit GiB", "kernel launches", "throttled s", "launch period ms"], rows)
    if (r.get("ps_table") or "").strip():
        lines += ["", "`alnair ps` while all four ran:", "", "```", r["ps_table"].rstrip(), "```"]
    lines += ["", "Lifecycle (`alnair events`, seconds after submission):", ""]
    rows = []
    for name in w["spans"]:
        events = r.get("lifecycle", {}).get(name, [])
        if not events:
            rows.append([name, "no event seen"])
            continue
        t0 = events[0]["at"]
        rows.append([name, " → ".join(f"{e['phase']} +{e['at'] - t0:.2f}" + (f" (exit {e['exit']})" if "exit" in e
                                                                             else "") for e in events)])
    lines += _table(["workload", "phases"], rows)
    return lines


