"""Score training detection and peak-memory prediction on labelled NVML recordings.

    python -m alnair_profiler.evaluation tests/data/gpu/h200            # development recordings
    python -m alnair_profiler.evaluation tests/data/gpu/h200 --heldout  # heldout_* only
    ... --publish-period 1.0   # as the exporter relays it: held values every 1.0 s

Recordings are made by ``scripts/gpu/nvml_record.py`` on a real GPU: a header with the
workloads and their ``is_training`` labels, samples every ~0.1 s with per-process
``sm_util_pct`` (None when NVML had no fresh sample) and ``used_memory_bytes``, and a truth
trailer with each workload's iteration end times (true period: their median spacing).
Two views of the same data: ``fresh`` keeps only the samples NVML really refreshed (about
every 0.2 s); ``--publish-period P`` is what the exporter puts on the bus — the last
value NVML gave, held, published every P seconds (the exporter's default is 1 s).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from ._detection import TrainingDetection, detect
from ._peak_memory import predict_peak


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
        ends = truth.get(pid, {}).get("iteration_end_s", [])
        gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
        out.append(RecordedWorkload(header["scenario"], w["workload"], bool(w["is_training"]),
                                    statistics.median(gaps) if gaps else 0.0, ut, uv, mt, mv,
                                    tuple(rt), tuple(ru)))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--heldout", action="store_true", help="score only heldout_* recordings")
    parser.add_argument("--publish-period", type=float, default=None,
                        help="seconds; utilisation as the exporter publishes it (held), not only fresh samples")
    args = parser.parse_args(argv)
    results = evaluate(args.directory, heldout=args.heldout, publish_period=args.publish_period)
    if not results:
        print(f"no recordings (*.jsonl.gz) in {args.directory}", file=sys.stderr)
        return 2
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
