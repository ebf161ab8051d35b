"""The open dataset's analysis: figures (PNG) and the numbers of docs/open-dataset.md.

Reads a published dataset through ``alnair_opendata`` and writes, into ``--out``:

* ``classes.png``: how the six classes differ, alone with the whole GPU (utilisation level and
  spread, kernel launch rate and launch-signature period, copy bytes by direction, CPU cores);
* ``traces.png``: one alone run per class, GPU utilisation and CPU cores second by second;
* ``sharing.png``: throughput under a limit and beside a co-runner, relative to alone at 100 %;
* ``interference.png``: each class beside each other at 50/50, relative to alone at 50 %;
* ``profiler.png``: the profiler's training detection and peak-memory prediction on this data;
* ``results.md``: the tables behind them (numbers computed here, never typed in by hand).

The profiler is scored on a split by run (pairs that shared the GPU go to the same side):
its fixed rules on the test runs, and beside them what a rule fitted on the training runs
would do (a threshold on ``busy_share`` for detection, a safety margin for the peak), so a
reader sees how far the shipped rules are from what this data supports.

``--update-docs`` puts ``results.md`` between the markers of ``docs/open-dataset.md`` (``--doc``)
and the figures under ``docs/images/open-dataset/`` (never from the dry run, ``--dataset sim``).

    .venv/bin/python scripts/opendata_analysis.py --dataset sim --out /tmp/od-analysis
    .venv/bin/python scripts/opendata_analysis.py --dataset h200 --update-docs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from alnair_opendata import OpenDataError, dataset_dir, load_runs, load_series  # noqa: E402
from alnair_profiler import detect_from_utilisation, predict_peak  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "open-dataset.md"
BEGIN, END = "<!-- results:begin (scripts/opendata_analysis.py) -->", "<!-- results:end -->"
CLASSES = ("cnn_train", "lm_train", "batch_infer", "poisson_infer", "dataload_train", "gnn_train")
PARAMS = ("workload", "batch", "width", "layers", "precision", "workers", "rate")
FIGURES = ("classes.png", "traces.png", "sharing.png", "interference.png", "profiler.png")


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.fmean(got) if got else None


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def side(run: dict[str, Any]) -> str:
    """'train' or 'test', by run (a shared pair together): 70 / 30 by a hash of the pair's ids."""
    key = "+".join(sorted(x for x in (run["run_id"], run["co_runner_run_id"]) if x))
    return "test" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10 < 3 else "train"


class Analysis:
    def __init__(self, dataset: str, root: Path | None) -> None:
        self.dataset = dataset
        self.runs = load_runs(dataset, root).to_pylist()
        self.series = {r["run_id"]: load_series(r["run_id"], dataset, root).to_pydict() for r in self.runs}
        self.gpu_data = any(r["gpu_util_ratio_max"] is not None for r in self.runs)
        meta = dataset_dir(dataset, root) / "meta.json"
        self.meta = json.loads(meta.read_text()) if meta.is_file() else {}

    def environment_rows(self) -> list[list[str]]:
        """One row per recording command (grid part): where, with what, how long start-up took."""
        rows = []
        for rec in self.meta.get("recordings", []):
            for m in [rec, *([rec["previous"]] if rec.get("previous") else [])]:
                env = m.get("environment") or {}
                rows.append([str(m.get("grid_part")), str(env.get("date", "?")), str(env.get("gpu", "?")),
                             str(env.get("driver", "?")), str(env.get("cuda", "?")),
                             str(env.get("workload_torch") or env.get("torch", "?")), str(env.get("python", "?")),
                             str(env.get("commit", "?")), _f(m.get("startup_s"), "{:.1f}"),
                             _f(m.get("elapsed_s"), "{:.0f}")])
        return rows

    def alone_full(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r["mode"] == "alone" and r["compute_percent"] == 100]

    # -- classes ---------------------------------------------------------------------------------

    def class_table(self) -> list[list[str]]:
        rows = []
        for c in CLASSES:
            rs = [r for r in self.alone_full() if r["workload"] == c]
            if not rs:
                continue
            rows.append([c, str(len(rs)), _f(_mean([r["gpu_util_ratio_mean"] for r in rs])),
                         _f(_mean([r["gpu_util_ratio_p90"] for r in rs])),
                         _f(_mean([r["kernel_launch_rate_mean"] for r in rs]), "{:.0f}"),
                         _f(_mean([r["cuda_launch_period_seconds_p50"] for r in rs]) and
                            _mean([r["cuda_launch_period_seconds_p50"] for r in rs]) * 1e3, "{:.1f}"),
                         _f(_mean([r["memcpy_htod_bytes_per_second_mean"] for r in rs]) and
                            _mean([r["memcpy_htod_bytes_per_second_mean"] for r in rs]) / 2**20, "{:.1f}"),
                         _f(_mean([r["memcpy_dtoh_bytes_per_second_mean"] for r in rs]) and
                            _mean([r["memcpy_dtoh_bytes_per_second_mean"] for r in rs]) / 2**20, "{:.2f}"),
                         _f(_mean([r["cpu_cores_mean"] for r in rs])),
                         _f(_mean([r["memory_peak_bytes"] for r in rs]) and
                            _mean([r["memory_peak_bytes"] for r in rs]) / 2**30),
                         _f(_mean([r["power_watts_mean"] for r in rs]), "{:.0f}")])
        return rows

    def plot_classes(self, out: Path) -> None:
        fig, axes = plt.subplots(2, 3, figsize=(15, 7))
        panels = [("gpu_util_ratio", "GPU utilisation (ratio), p10/p50/p90 over seconds", 1.0),
                  ("kernel_launch_rate", "kernel launches per second, p10/p50/p90", 1.0),
                  ("cuda_launch_period_seconds", "launch-signature period, ms, p10/p50/p90", 1e3),
                  ("memcpy_htod_bytes_per_second", "host→device copies, MiB/s, p10/p50/p90", 2**-20),
                  ("memcpy_dtoh_bytes_per_second", "device→host copies, MiB/s, p10/p50/p90", 2**-20),
                  ("cpu_cores", "CPU cores of the process tree, p10/p50/p90", 1.0)]
        for ax, (name, title, k) in zip(axes.flat, panels, strict=True):
            for i, c in enumerate(CLASSES):
                rs = [r for r in self.alone_full() if r["workload"] == c]
                mid = [r[f"{name}_p50"] for r in rs if r[f"{name}_p50"] is not None]
                if not mid:
                    continue
                lo = _mean([r[f"{name}_p10"] for r in rs]) or 0.0
                hi = _mean([r[f"{name}_p90"] for r in rs]) or 0.0
                m = statistics.fmean(mid)
                ax.bar(i, m * k, color=f"C{i}")
                ax.errorbar(i, m * k, yerr=[[max(0.0, (m - lo) * k)], [max(0.0, (hi - m) * k)]], color="black",
                            capsize=3)
            ax.set_xticks(range(len(CLASSES)), [c.replace("_", "\n") for c in CLASSES], fontsize=8)
            ax.set_title(title, fontsize=9)
            if not ax.patches:
                ax.text(0.5, 0.5, "not in this dataset", ha="center", va="center", transform=ax.transAxes)
        fig.suptitle(f"Workload classes alone with the whole GPU ({self.label()})")
        fig.tight_layout()
        fig.savefig(out / "classes.png", dpi=100)
        plt.close(fig)

    def plot_traces(self, out: Path) -> None:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
        for i, c in enumerate(CLASSES):
            rs = [r for r in self.alone_full() if r["workload"] == c]
            if not rs:
                continue
            s = self.series[rs[0]["run_id"]]
            pts = [(t, u) for t, u in zip(s["t_s"], s["gpu_util_ratio"], strict=True) if u is not None]
            top.plot([p[0] for p in pts], [p[1] for p in pts], label=c, color=f"C{i}")
            cpu = s["cpu_seconds_total"]
            ts = s["t_s"]
            cores = [(ts[j], (cpu[j] - cpu[j - 1]) / (ts[j] - ts[j - 1])) for j in range(1, len(cpu))
                     if cpu[j] is not None and cpu[j - 1] is not None and ts[j] > ts[j - 1]]
            bottom.plot([p[0] for p in cores], [p[1] for p in cores], label=c, color=f"C{i}")
        top.set_ylabel("GPU utilisation (ratio)")
        bottom.set_ylabel("CPU cores")
        bottom.set_xlabel("seconds since `alnair run`")
        top.legend(fontsize=8, loc="upper right")
        top.set_title(f"One alone run per class, second by second ({self.label()})")
        fig.tight_layout()
        fig.savefig(out / "traces.png", dpi=100)
        plt.close(fig)

    # -- sharing and limits -----------------------------------------------------------------------

    def relative_throughput(self) -> dict[str, dict[str, list[float]]]:
        """Per class and condition: throughput / the same configuration's alone-at-100 % throughput."""
        base = {tuple(r[p] for p in PARAMS): r["throughput_per_second"] for r in self.alone_full()
                if r["throughput_per_second"]}
        out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in self.runs:
            ref = base.get(tuple(r[p] for p in PARAMS))
            if not ref or not r["throughput_per_second"] or (r["mode"] == "alone" and r["compute_percent"] == 100):
                continue
            cond = (f"alone {r['compute_percent']}%" if r["mode"] == "alone"
                    else f"shared {r['compute_percent']}/{r['co_runner_compute_percent']}")
            out[r["workload"]][cond].append(r["throughput_per_second"] / ref)
        return out

    def interference(self) -> dict[tuple[str, str], list[float]]:
        """(class, co-runner class) at 50/50: throughput / the same configuration alone at 50 %,
        so what is left is the co-runner's effect beyond the limit (1: none)."""
        limited = {tuple(r[p] for p in PARAMS): r["throughput_per_second"] for r in self.runs
                   if r["mode"] == "alone" and r["compute_percent"] == 50 and r["throughput_per_second"]}
        out: dict[tuple[str, str], list[float]] = defaultdict(list)
        for r in self.runs:
            ref = limited.get(tuple(r[p] for p in PARAMS))
            if r["mode"] == "shared" and r["compute_percent"] == 50 and r["co_runner_compute_percent"] == 50 \
                    and ref and r["throughput_per_second"]:
                out[(r["workload"], r["co_runner"])].append(r["throughput_per_second"] / ref)
        return out

    def plot_interference(self, cells: dict[tuple[str, str], list[float]], out: Path) -> None:
        fig, ax = plt.subplots(figsize=(7.5, 6))
        grid = [[statistics.fmean(cells[(a, b)]) if cells.get((a, b)) else float("nan") for b in CLASSES]
                for a in CLASSES]
        im = ax.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.5)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(CLASSES)), CLASSES, rotation=30, fontsize=8)
        ax.set_yticks(range(len(CLASSES)), CLASSES, fontsize=8)
        ax.set_xlabel("co-runner (50 %)")
        ax.set_ylabel("workload (50 %)")
        fig.colorbar(im, ax=ax, label="throughput / alone at 50 %")
        ax.set_title(f"Interference beyond the limit ({self.label()})", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "interference.png", dpi=100)
        plt.close(fig)

    def plot_sharing(self, rel: dict[str, dict[str, list[float]]], out: Path) -> None:
        conds = sorted({c for v in rel.values() for c in v})
        fig, ax = plt.subplots(figsize=(11, 4.5))
        width = 0.8 / max(1, len(conds))
        for j, cond in enumerate(conds):
            xs = [i + j * width for i, c in enumerate(CLASSES) if rel.get(c, {}).get(cond)]
            ys = [statistics.fmean(rel[c][cond]) for c in CLASSES if rel.get(c, {}).get(cond)]
            ax.bar(xs, ys, width, label=cond)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(CLASSES))], CLASSES, fontsize=8)
        ax.set_ylabel("throughput / alone at 100 %")
        ax.set_title(f"What limits and a co-runner do to each class ({self.label()})")
        if conds:
            ax.legend(fontsize=8, ncol=3)
        fig.tight_layout()
        fig.savefig(out / "sharing.png", dpi=100)
        plt.close(fig)

    # -- the profiler -------------------------------------------------------------------------------

    def profiler(self) -> dict[str, Any]:
        res: dict[str, Any] = {"detect": [], "peak": []}
        for r in self.runs:
            s = self.series[r["run_id"]]
            util = [(t, u) for t, u in zip(s["t_s"], s["gpu_util_ratio"], strict=True) if u is not None]
            det = detect_from_utilisation([p[0] for p in util], [p[1] for p in util])
            res["detect"].append({"run": r, "side": side(r), "truth": r["is_training"], "rule": det.is_training,
                                  "live": r["profile_is_training"], "busy_share": r["busy_share"]})
            mem = [(t, m) for t, m in zip(s["t_s"], s["gpu_memory_bytes"], strict=True) if m is not None]
            if mem and r["memory_peak_bytes"]:
                pred = predict_peak([p[0] for p in mem], [p[1] for p in mem], [p[0] for p in util],
                                    [p[1] for p in util])
                if pred:
                    res["peak"].append({"run": r, "side": side(r), "actual": max(m for _, m in mem),
                                        "predicted": float(pred.predicted_bytes), "at": pred.run_fraction})
        train = [d for d in res["detect"] if d["side"] == "train" and d["busy_share"] is not None]
        best = None
        for cut in sorted({d["busy_share"] for d in train}):
            acc = sum((d["busy_share"] >= cut) == d["truth"] for d in train) / len(train)
            if best is None or acc > best[1]:
                best = (cut, acc)
        res["busy_cut"] = best[0] if best else None
        ratios = sorted(p["actual"] / p["predicted"] for p in res["peak"] if p["side"] == "train" and p["predicted"])
        res["margin"] = ratios[min(len(ratios) - 1, math.ceil(0.9 * len(ratios)) - 1)] if ratios else None
        return res

    def detection_rows(self, res: dict[str, Any]) -> list[list[str]]:
        rows = []
        for name, pick in (("profiler rule (detect_from_utilisation)", lambda d: d["rule"]),
                           ("live profile (`alnair profile`)", lambda d: d["live"]),
                           (f"busy_share >= {_f(res['busy_cut'])} (fitted on train)",
                            lambda d: d["busy_share"] is not None and res["busy_cut"] is not None
                            and d["busy_share"] >= res["busy_cut"])):
            test = [d for d in res["detect"] if d["side"] == "test" and pick(d) is not None]
            tp = sum(1 for d in test if pick(d) and d["truth"])
            fp = sum(1 for d in test if pick(d) and not d["truth"])
            fn = sum(1 for d in test if not pick(d) and d["truth"])
            acc = sum(1 for d in test if bool(pick(d)) == d["truth"]) / len(test) if test else None
            rows.append([name, str(len(test)), _f(acc), _f(tp / (tp + fp) if tp + fp else None),
                         _f(tp / (tp + fn) if tp + fn else None)])
        return rows

    def peak_rows(self, res: dict[str, Any]) -> list[list[str]]:
        rows = []
        for name, k in (("profiler rule (predict_peak)", 1.0), (f"x {_f(res['margin'])} (fitted on train)",
                                                                 res["margin"])):
            test = [p for p in res["peak"] if p["side"] == "test"]
            if k is None or not test:
                rows.append([name, str(len(test)), "-", "-", "-"])
                continue
            err = [abs(p["predicted"] * k - p["actual"]) / p["actual"] for p in test]
            covered = sum(p["predicted"] * k >= p["actual"] for p in test) / len(test)
            rows.append([name, str(len(test)), _f(statistics.median(err) * 100, "{:.1f} %"), _f(covered * 100,
                                                                                                 "{:.0f} %"),
                         _f(statistics.fmean(p["at"] for p in test) * 100, "{:.0f} %")])
        return rows

    def plot_profiler(self, res: dict[str, Any], out: Path) -> None:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
        for i, c in enumerate(CLASSES):
            ds = [d for d in res["detect"] if d["run"]["workload"] == c]
            if ds:
                left.bar(i, sum(bool(d["rule"]) for d in ds) / len(ds), color=f"C{i}")
        left.set_xticks(range(len(CLASSES)), [c.replace("_", "\n") for c in CLASSES], fontsize=8)
        left.set_ylabel("share of runs detected as training")
        left.set_title("detect_from_utilisation per class (all runs)", fontsize=9)
        pts = res["peak"]
        if pts:
            right.scatter([p["actual"] / 2**30 for p in pts], [p["predicted"] / 2**30 for p in pts],
                          c=["C1" if p["side"] == "test" else "C0" for p in pts], s=14)
            top = max(max(p["actual"], p["predicted"]) for p in pts) / 2**30
            right.plot([0, top], [0, top], color="black", linewidth=0.8)
        else:
            right.text(0.5, 0.5, "no GPU memory series in this dataset", ha="center", va="center",
                       transform=right.transAxes)
        right.set_xlabel("actual peak GPU memory, GiB")
        right.set_ylabel("predicted (predict_peak), GiB")
        right.set_title("peak-memory prediction (orange: test runs)", fontsize=9)
        fig.suptitle(f"The profiler on this data ({self.label()})")
        fig.tight_layout()
        fig.savefig(out / "profiler.png", dpi=100)
        plt.close(fig)

    # -- the report ------------------------------------------------------------------------------

    def label(self) -> str:
        gpus = sorted({r["gpu"] for r in self.runs})
        return f"{self.dataset}: {len(self.runs)} runs, {', '.join(gpus)}"

    def report(self, out: Path, figures: str) -> str:
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in self.runs:
            counts[r["workload"]][r["mode"]] += 1
        gpus = ", ".join(sorted({r["gpu"] for r in self.runs}))
        lines = [f"Dataset **{self.dataset}**: {len(self.runs)} runs on {gpus}"
                 f"; {sum(len(v['t_s']) for v in self.series.values())} per-second samples; "
                 f"{len(self.runs[0]) if self.runs else 0} summary columns.", ""]
        if not self.gpu_data:
            lines += ["**No GPU series in this dataset** (a simulated card exports none): the GPU columns and the "
                      "profiler's scores below are empty; only the host side (CPU, RSS, I/O, iterations) is real.", ""]
        lines += ["Recorded by (`meta.json`; start-up: `alnair up` to healthy):", ""]
        lines += _table(["part", "date", "GPU", "driver", "CUDA", "torch", "python", "commit", "start-up s",
                         "elapsed s"], self.environment_rows())
        lines += [""]
        lines += _table(["class", "alone", "shared"], [[c, str(counts[c]["alone"]), str(counts[c]["shared"])]
                                                       for c in CLASSES if c in counts])
        lines += ["", "### How the classes differ (alone, whole GPU; means over runs)", "",
                  f"![classes]({figures}/classes.png)", "", f"![traces]({figures}/traces.png)", ""]
        lines += _table(["class", "runs", "GPU util mean", "GPU util p90", "launches/s", "launch period ms",
                         "H→D MiB/s", "D→H MiB/s", "CPU cores", "peak GiB", "power W"], self.class_table())
        rel = self.relative_throughput()
        self.plot_sharing(rel, out)
        conds = sorted({c for v in rel.values() for c in v})
        lines += ["", "### What limits and sharing do (throughput relative to alone at 100 %)", "",
                  f"![sharing]({figures}/sharing.png)", ""]
        lines += _table(["class", *conds], [[c, *[_f(statistics.fmean(rel[c][k])) if rel.get(c, {}).get(k) else "-"
                                                  for k in conds]] for c in CLASSES if c in rel])
        cells = self.interference()
        self.plot_interference(cells, out)
        lines += ["", "Interference beyond the limit: throughput at 50/50 beside each co-runner / the same "
                      "configuration alone at 50 % (1: the co-runner costs nothing beyond the limit):", "",
                  f"![interference]({figures}/interference.png)", ""]
        partners = [c for c in CLASSES if any(k[1] == c for k in cells)]
        matrix = [[a, *[_f(statistics.fmean(cells[(a, b)])) if cells.get((a, b)) else "-" for b in partners]]
                  for a in CLASSES if any(k[0] == a for k in cells)]
        lines += (_table(["workload \\ co-runner", *partners], matrix) if cells
                  else ["(no 50/50 pairs with an alone-at-50 % baseline)"])
        throttled = [[c, _f(_mean([r["throttled_share"] for r in self.runs if r["workload"] == c
                                   and r["compute_percent"] == p]))] for c in CLASSES for p in (50, 25)]
        lines += ["", "Share of the run that launches waited for tokens (interceptor), by class and limit:", ""]
        lines += _table(["class", "limit 50 %", "limit 25 %"],
                        [[c, throttled[2 * i][1], throttled[2 * i + 1][1]] for i, c in enumerate(CLASSES)])
        res = self.profiler()
        self.plot_profiler(res, out)
        n_test = sum(d["side"] == "test" for d in res["detect"])
        lines += ["", "### The profiler on this data (split by run: "
                      f"{len(res['detect']) - n_test} train, {n_test} test; a shared pair on one side)", "",
                  f"![profiler]({figures}/profiler.png)", "", "Training detection, test runs:", ""]
        lines += _table(["rule", "runs", "accuracy", "precision", "recall"], self.detection_rows(res))
        lines += ["", "Peak GPU memory prediction, test runs (error relative to the actual peak; covered: "
                      "prediction at or above it; made at: share of the run when the prediction is made):", ""]
        lines += _table(["rule", "runs", "median error", "covered", "made at"], self.peak_rows(res))
        return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="h200", help="data/open-dataset/<dataset> (h200; sim: the dry run)")
    p.add_argument("--root", type=Path, default=None, help="where the datasets are (default data/open-dataset)")
    p.add_argument("--out", type=Path, default=None, help="figures and results.md (default: a temp dir)")
    p.add_argument("--update-docs", action="store_true",
                   help="write the results into --doc and the figures into images/open-dataset/ beside it")
    p.add_argument("--doc", type=Path, default=DOC, help="the document --update-docs fills (default %(default)s)")
    a = p.parse_args(argv)
    if a.update_docs and a.dataset == "sim":
        p.error("--update-docs takes the GPU recording only: the sim dataset is never presented as H200 data")
    out = a.doc.parent / "images" / "open-dataset" if a.update_docs else (a.out or Path("opendata-analysis"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        an = Analysis(a.dataset, a.root)
    except OpenDataError as e:
        print(f"opendata_analysis: error: {e}", file=sys.stderr)
        return 2
    an.plot_classes(out)
    an.plot_traces(out)
    text = an.report(out, "images/open-dataset" if a.update_docs else ".")
    (out / "results.md").write_text(text)
    if a.update_docs:
        doc = a.doc.read_text()
        if BEGIN not in doc or END not in doc:
            print(f"opendata_analysis: error: {a.doc} lacks the markers {BEGIN} ... {END}", file=sys.stderr)
            return 2
        head, rest = doc.split(BEGIN, 1)
        a.doc.write_text(head + BEGIN + "\n" + text + rest[rest.index(END):])
    print(f"opendata_analysis: {', '.join(FIGURES)} and results.md in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
