"""Score training detection and peak-memory prediction on labelled NVML recordings.

    python -m alnair_profiler.evaluation tests/data/gpu/h200            # development recordings
    python -m alnair_profiler.evaluation tests/data/gpu/h200 --heldout  # heldout_* only
    ... --publish-period 1.0   # as the exporter relays it: held values every 1.0 s
    python -m alnair_profiler.evaluation tests/data/gpu/h200/corpus --by-family --publish-period 1.0

``--by-family`` is the protocol of issue #24 §1: the NVML rule's fitted threshold (the
plateau floor, :func:`fit_rule`) is fitted on every family but one and scored on that one's
runs only, for each family in turn, so a family never grades a rule tuned on itself. It is
reported per family (what its runs were called) for three paths: NVML as relayed, fresh
NVML, and the launch signature with NVML where the signature abstains.

Recordings are made by ``scripts/gpu/nvml_record.py`` on a real GPU: a header with the
workloads, their ``is_training`` labels and (in the corpus) their ``family``, samples every ~0.1 s with per-process
``sm_util_pct`` (None when NVML had no fresh sample) and ``used_memory_bytes``, and a truth
trailer with each workload's iteration end times (true period: their median spacing);
corpus recordings also carry the interceptor's launch signature every 0.5 s.
Two views of the same data: ``fresh`` keeps only the samples NVML really refreshed (about
every 0.2 s); ``--publish-period P`` is what the exporter puts on the bus — the last
value NVML gave, held, published every P seconds (the exporter's default is 1 s).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ._detection import (
    BUSY_RATIO,
    DEFAULT_RULE,
    EVIDENCE_LAUNCH,
    LaunchReport,
    PlateauShape,
    TrainingDetection,
    UtilisationRule,
    detect,
    plateau_shape,
)
from ._peak_memory import predict_peak

_FAMILY = {"inference_poisson": "poisson_infer"}  # recordings before families were named


@dataclass(frozen=True)
class RecordedWorkload:
    scenario: str
    workload: str
    is_training: bool
    true_period_seconds: float
    util_times: list[float]
    util_values: list[float]
    mem_times: list[float]
    mem_values: list[float]
    # Every recorded row: time and the NVML value, None where NVML had no fresh sample.
    raw_times: tuple[float, ...] = ()
    raw_util: tuple[float | None, ...] = ()
    # The workload family (a recording's header names it; older ones are named after the
    # workload); empty where workloads share the GPU and no one series is a family's.
    family: str = ""
    # The interceptor's reports as the exporter relays them (periods > 0 only, as the profiler keeps).
    launches: tuple[LaunchReport, ...] = ()

    def published(self, period: float | None) -> tuple[list[float], list[float]]:
        """Utilisation as the profiler receives it (see the module docstring)."""
        if period is None:
            return self.util_times, self.util_values
        times: list[float] = []
        values: list[float] = []
        held, next_t = 0.0, None
        for t, v in zip(self.raw_times, self.raw_util, strict=True):
            held = v if v is not None else held
            if next_t is None or t >= next_t - 1e-9:
                times.append(t)
                values.append(held)
                next_t = t + period
        return times, values


@dataclass(frozen=True)
class Scored:
    recording: RecordedWorkload
    detection: TrainingDetection
    true_peak_bytes: int
    predicted_peak_bytes: int
    predicted_at_fraction: float

    @property
    def correct(self) -> bool:
        return self.detection.is_training == self.recording.is_training

    @property
    def period_error(self) -> float | None:
        """Relative error of a reported period; None where none was reported or none is true."""
        true = self.recording.true_period_seconds
        got = self.detection.period_seconds
        return abs(got - true) / true if got > 0 and true > 0 else None


def load_recording(path: Path) -> list[RecordedWorkload]:
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header = lines[0]
    samples = [x for x in lines if x.get("kind") == "sample"]
    truth = {w["pid"]: w for x in lines if x.get("kind") == "truth" for w in x["workloads"]}
    out = []
    for w in header["workloads"]:
        pid = w["pid"]
        ut, uv, mt, mv, rt, ru = [], [], [], [], [], []
        for s in samples:
            for p in s["processes"]:
                if p["pid"] != pid:
                    continue
                rt.append(float(s["t"]))
                ru.append(None if p.get("sm_util_pct") is None else p["sm_util_pct"] / 100.0)
                if p.get("sm_util_pct") is not None:
                    ut.append(float(s["t"]))
                    uv.append(p["sm_util_pct"] / 100.0)
                if p.get("used_memory_bytes") is not None:
                    mt.append(float(s["t"]))
                    mv.append(float(p["used_memory_bytes"]))
        launches = tuple(LaunchReport(float(s["t"]), r["period_ns"] / 1e9, int(r["repeats"]))
                         for s in samples for r in s.get("launches") or ()
                         if r["pid"] == pid and r["period_ns"] > 0)
        family = "" if len(header["workloads"]) > 1 else w.get("family") or _FAMILY.get(w["workload"], w["workload"])
        ends = truth.get(pid, {}).get("iteration_end_s", [])
        gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
        out.append(RecordedWorkload(header["scenario"], w["workload"], bool(w["is_training"]),
                                    statistics.median(gaps) if gaps else 0.0, ut, uv, mt, mv,
                                    tuple(rt), tuple(ru), family, launches))
    return out


def score(rec: RecordedWorkload, publish_period: float | None = None) -> Scored:
    ut, uv = rec.published(publish_period)
    detection = detect((), ut, uv)
    peak = predict_peak(rec.mem_times, rec.mem_values, ut, uv)
    true_peak = int(max(rec.mem_values, default=0))
    return Scored(rec, detection, true_peak, peak.predicted_bytes if peak else 0,
                  peak.run_fraction if peak else 1.0)


def evaluate(directory: Path, *, heldout: bool, publish_period: float | None = None) -> list[Scored]:
    paths = sorted(p for p in directory.glob("*.jsonl.gz")
                   if p.name.startswith("heldout_") == heldout)
    return [score(r, publish_period) for p in paths for r in load_recording(p)]


def report(results: list[Scored]) -> str:
    tp = sum(r.detection.is_training and r.recording.is_training for r in results)
    fp = sum(r.detection.is_training and not r.recording.is_training for r in results)
    fn = sum(not r.detection.is_training and r.recording.is_training for r in results)
    accuracy = sum(r.correct for r in results) / len(results) if results else 0.0
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    rows = ["| recording | workload | label | detected | confidence | true period | reported period "
            "| true peak MiB | predicted MiB (at % of run) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rec, d = r.recording, r.detection
        rows.append(
            f"| {rec.scenario} | {rec.workload} | {'train' if rec.is_training else 'other'} "
            f"| {'train' if d.is_training else 'other'} | {d.confidence:.2f} "
            f"| {rec.true_period_seconds * 1e3:.1f} ms | "
            f"{f'{d.period_seconds * 1e3:.1f} ms' if d.period_seconds else 'unresolved'} "
            f"| {r.true_peak_bytes / 2**20:.0f} | {r.predicted_peak_bytes / 2**20:.0f} "
            f"({r.predicted_at_fraction:.0%}) |")
    errors = [abs(r.predicted_peak_bytes - r.true_peak_bytes) / r.true_peak_bytes
              for r in results if r.true_peak_bytes]
    periods = [e for r in results if (e := r.period_error) is not None]
    rows.append("")
    rows.append(f"accuracy {accuracy:.1%} ({sum(r.correct for r in results)}/{len(results)}), "
                f"precision {precision:.1%}, recall {recall:.1%}; "
                f"periods reported {len(periods)}/{sum(r.recording.true_period_seconds > 0 for r in results)}"
                + (f", median period error {statistics.median(periods):.1%}" if periods else "")
                + (f"; peak-memory prediction median error {statistics.median(errors):.1%}, "
                   f"worst {max(errors):.1%}" if errors else ""))
    return "\n".join(rows)


# --- Leave one family out (issue #24 §1) -------------------------------------------------

PATHS = {
    "nvml": "NVML only, as the exporter relays it (last value held, every {period:g} s)",
    "fresh": "NVML only, the samples NVML refreshed (~every 0.2 s)",
    "launch": "launch signature first; where it abstains, NVML as relayed every {period:g} s",
}


@dataclass(frozen=True)
class HeldOut:
    """One recording scored by a rule fitted without any run of its family."""

    recording: RecordedWorkload
    detection: TrainingDetection
    rule: UtilisationRule
    by_launch: bool  # the launch signature decided (it did not abstain)

    @property
    def correct(self) -> bool:
        return self.detection.is_training == self.recording.is_training


def load_recordings(directories: Sequence[Path]) -> list[RecordedWorkload]:
    """Every single-workload recording under the directories (shared-GPU ones have no family)."""
    paths = sorted({p for d in directories for p in d.glob("*.jsonl.gz")})
    return [r for p in paths for r in load_recording(p) if r.family]




def fit_rule(shapes: Sequence[tuple[PlateauShape, bool, str]]) -> UtilisationRule:
    """The plateau-level floor that makes the fewest errors on these runs, each family weighing
    the same (a family recorded three times must not outvote one recorded once); ties go to
    the fewest runs wrong, then to the lowest floor, the rule as it was before the floor
    existed. Candidates lie halfway
    (geometrically) between neighbouring plateau levels, so the floor keeps the largest
    margin the runs allow on both sides."""
    levels = sorted({round(s.level, 4) for s, _, _ in shapes if s.busy and s.level > 0})
    candidates = [BUSY_RATIO]
    candidates += [math.sqrt(a * b) for a, b in zip(levels, levels[1:], strict=False) if math.sqrt(a * b) > BUSY_RATIO]
    runs: dict[str, int] = {}
    for _, _, family in shapes:
        runs[family] = runs.get(family, 0) + 1
    best: tuple[float, int, float] | None = None
    for level in candidates:
        rule = replace(DEFAULT_RULE, min_level=level)
        wrong = [(rule.is_training(s) != label, family) for s, label, family in shapes]
        weighted = sum(w / runs[f] for w, f in wrong)
        key = (round(weighted, 9), sum(w for w, _ in wrong), level)
        if best is None or key < best:
            best = key
    return replace(DEFAULT_RULE, min_level=round(best[2], 4) if best else BUSY_RATIO)


def leave_family_out(recordings: Sequence[RecordedWorkload], path: str = "nvml",
                     publish_period: float = 1.0) -> list[HeldOut]:
    """For each family: fit on every other family's runs, score on this family's only.
    ``path`` is one of :data:`PATHS`; the launch path's own thresholds are not fitted."""
    if path not in PATHS:
        raise ValueError(f"path {path!r}: expected one of {', '.join(PATHS)}")
    series = {id(r): r.published(None if path == "fresh" else publish_period) for r in recordings}
    shapes = {k: plateau_shape(*v) for k, v in series.items()}
    out: list[HeldOut] = []
    for family in sorted({r.family for r in recordings}):
        rule = fit_rule([(shapes[id(r)], r.is_training, r.family) for r in recordings if r.family != family])
        for r in (r for r in recordings if r.family == family):
            times, values = series[id(r)]
            launches = r.launches if path == "launch" else ()
            d = detect(launches, times, values, rule)
            out.append(HeldOut(r, d, rule, d.evidence == EVIDENCE_LAUNCH))
    return out


def _rates(results: Sequence[HeldOut]) -> tuple[float, float, float]:
    tp = sum(r.detection.is_training and r.recording.is_training for r in results)
    fp = sum(r.detection.is_training and not r.recording.is_training for r in results)
    fn = sum(not r.detection.is_training and r.recording.is_training for r in results)
    return (sum(r.correct for r in results) / len(results) if results else 0.0,
            tp / (tp + fp) if tp + fp else 0.0, tp / (tp + fn) if tp + fn else 0.0)


def family_report(results: Sequence[HeldOut], path: str, publish_period: float = 1.0) -> str:
    """Per family: label, runs, what they were called, the floor fitted without them."""
    rows = [f"{PATHS[path].format(period=publish_period)}; each family scored by a rule fitted on the others", "",
            "| family | label | runs | → train | → other | fitted plateau floor | misclassified (reason) |",
            "|---|---|---|---|---|---|---|"]
    for family in sorted({r.recording.family for r in results}):
        mine = [r for r in results if r.recording.family == family]
        label = "train" if mine[0].recording.is_training else "other"
        wrong = "; ".join(f"{r.recording.scenario} ({r.detection.reason.split(';')[0]})" for r in mine if not r.correct)
        rows.append(f"| {family} | {label} | {len(mine)} | {sum(r.detection.is_training for r in mine)} "
                    f"| {sum(not r.detection.is_training for r in mine)} | {mine[0].rule.min_level:.1%} | {wrong} |")
    accuracy, precision, recall = _rates(results)
    tp = sum(r.detection.is_training and r.recording.is_training for r in results)
    fn = sum(not r.detection.is_training and r.recording.is_training for r in results)
    fp = sum(r.detection.is_training and not r.recording.is_training for r in results)
    tn = len(results) - tp - fn - fp
    rows += ["", f"accuracy {accuracy:.1%} ({sum(r.correct for r in results)}/{len(results)}), "
             f"precision {precision:.1%}, recall {recall:.1%}; train→train {tp}, train→other {fn}, "
             f"other→train {fp}, other→other {tn}"]
    if path == "launch":
        decided = [r for r in results if r.by_launch]
        rows.append(f"the launch signature decided {len(decided)}/{len(results)} "
                    f"({sum(r.correct for r in decided)} right); NVML decided the other {len(results) - len(decided)} "
                    f"({sum(r.correct for r in results if not r.by_launch)} right)")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directories", type=Path, nargs="+", metavar="DIR")
    parser.add_argument("--heldout", action="store_true", help="score only heldout_* recordings")
    parser.add_argument("--publish-period", type=float, default=None,
                        help="seconds; utilisation as the exporter publishes it (held), not only fresh samples")
    parser.add_argument("--by-family", action="store_true",
                        help="leave one family out, for each path (NVML at the publish period, default 1 s; "
                             "fresh NVML; launch signature first); every recording in the directories")
    args = parser.parse_args(argv)
    if args.by_family:
        recordings = load_recordings(args.directories)
        if not recordings:
            print(f"no single-workload recordings (*.jsonl.gz) in {', '.join(map(str, args.directories))}",
                  file=sys.stderr)
            return 2
        period = args.publish_period or 1.0
        print("\n\n".join(family_report(leave_family_out(recordings, path, period), path, period) for path in PATHS))
        return 0
    results = [r for d in args.directories
               for r in evaluate(d, heldout=args.heldout, publish_period=args.publish_period)]
    if not results:
        print(f"no recordings (*.jsonl.gz) in {', '.join(map(str, args.directories))}", file=sys.stderr)
        return 2
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
