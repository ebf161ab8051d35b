"""Is a workload a deep-learning training job, and what is its iteration period?

Three kinds of evidence, in order of trust:

* **The names of the launched kernels** (``CudaSample.training_kernel_launches_total``,
  ``kernel_names_read``, ``torch_kernels_seen``): the interceptor reads each kernel's name
  once (``cuFuncGetName``) and counts launches of kernels named ``*backward*`` (autograd) or
  ``*multi_tensor_apply*`` (PyTorch's fused optimizer step). On the H200 corpus of 20
  families every PyTorch training family launched them and no inference family did, steady
  batched inference included, which the two kinds below both call training
  (docs/benchmarks.md, "What tells them apart: kernel names"). A PyTorch workload that
  launched many kernels and none of those is therefore not training; a workload without
  PyTorch kernels (or without names: an old driver) is left to the others.
* **The interceptor's launch signature** (``CudaSample.launch_period_seconds`` / ``_repeats``):
  the C library hashes the sequence of launched kernels and measures how often the same
  sequence comes back. A training loop repeats one sequence per iteration, so a sequence
  seen repeating many times at a stable period *is* an iteration. The estimate is the
  repeats-weighted median of the periods reported over the run; confidence grows with the
  repeats and falls with the spread between reports. An inference server also repeats one
  sequence (per request) but at random intervals: a spread above ``MAX_LAUNCH_SPREAD`` is
  not taken as a loop.
* **NVML per-process utilisation**, where the workload runs without the interceptor. NVML
  refreshes a process's utilisation only about every 0.2 s, so its series cannot show any
  period under ~0.4 s (Nyquist); measured on an H200 every training loop we recorded
  iterates in 1–40 ms and looks like a flat plateau. What the series *can* show is the
  shape that distinguishes training from the rest: a long, steady plateau of non-zero
  utilisation (training) versus bursts and gaps (irregular compute, inference with random
  arrivals) or nothing (idle notebooks). The period is taken from the autocorrelation of
  the plateau only when a peak stands out at a lag the sampling can resolve; otherwise it
  is reported as 0 (unknown), never guessed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

EVIDENCE_KERNEL_NAMES = "kernel-names"
EVIDENCE_LAUNCH = "launch-signature"
EVIDENCE_NVML = "nvml-autocorrelation"

BUSY_RATIO = 0.03            # utilisation below this counts as idle
MIN_PLATEAU_SECONDS = 3.0    # a training plateau lasts at least this long
MAX_PLATEAU_CV = 0.3         # median step / median level within the plateau
MIN_PLATEAU_SHARE = 0.6      # of the busy span the plateau must cover
MIN_PLATEAU_LEVEL = 0.055    # median utilisation of the plateau: fitted on the H200 corpus (see UtilisationRule)
MIN_LAUNCH_REPEATS = 8       # repeats of the launch sequence before it counts as a loop
MAX_GAP_FACTOR = 4.0         # a gap this many times the sampling step ends a plateau
MAX_LAUNCH_SPREAD = 0.25     # relative spread of reported periods still read as one loop
ACF_WINDOW = 600             # samples (2 min at 0.2 s): autocorrelation is O(n²) in pure Python
MIN_NAMED_LAUNCHES = 5_000   # kernel launches of a PyTorch workload before "no training kernel" counts


@dataclass(frozen=True)
class TrainingDetection:
    is_training: bool = False
    period_seconds: float = 0.0
    confidence: float = 0.0
    evidence: str = ""
    reason: str = ""

    def to_doc(self) -> dict[str, object]:
        return {"is_training": self.is_training, "period_seconds": self.period_seconds,
                "confidence": self.confidence, "evidence": self.evidence, "reason": self.reason}

    @classmethod
    def from_doc(cls, doc: dict[str, object] | None) -> TrainingDetection:
        if not doc:
            return cls()
        return cls(bool(doc.get("is_training")), float(doc.get("period_seconds", 0.0)),  # type: ignore[arg-type]
                   float(doc.get("confidence", 0.0)), str(doc.get("evidence", "")),  # type: ignore[arg-type]
                   str(doc.get("reason", "")))


@dataclass(frozen=True)
class LaunchReport:
    """One interceptor report: the launch sequence's period and how often it repeated."""

    t: float
    period_seconds: float
    repeats: int


@dataclass(frozen=True)
class KernelNameReport:
    """One GPU's kernel-name totals of a workload, as the interceptor last published them
    (totals since its processes started, exited ones included)."""

    uid: str
    t: float
    gpu_uuid: str
    kernel_launches: int          # every kernel and graph launch (CudaSample.kernel_launches_total)
    training_launches: int        # of kernels named like training (backward, multi_tensor_apply)
    names_read: bool              # the interceptor could read kernel names at all
    torch_seen: bool              # a PyTorch (at::native) kernel ran


def detect(launches: Sequence[LaunchReport], times: Sequence[float],
           utilisation: Sequence[float], rule: UtilisationRule | None = None, *,
           kernel_names: Sequence[KernelNameReport] = ()) -> TrainingDetection:
    """Decide from the kernel names where they tell, else from the launch signature where
    there is one, else from the NVML series. ``kernel_names``: the latest report per GPU."""
    by_launch = detect_from_launches(launches)
    by_names = detect_from_kernel_names(kernel_names, period_seconds=by_launch.period_seconds if by_launch else 0.0)
    if by_names is not None:
        return by_names
    if by_launch is not None:
        return by_launch
    return detect_from_utilisation(times, utilisation, rule or DEFAULT_RULE)


def detect_from_kernel_names(reports: Sequence[KernelNameReport], *,
                             period_seconds: float = 0.0) -> TrainingDetection | None:
    """Training when a training-named kernel ran; not training when a PyTorch workload ran
    at least ``MIN_NAMED_LAUNCHES`` kernels and none of them; None otherwise (no names, no
    PyTorch kernel, or too few launches yet). Names carry no period: ``period_seconds`` (the
    launch signature's, 0 = unknown) is reported with a training verdict."""
    read = [r for r in reports if r.names_read]
    if not read:
        return None
    training = sum(r.training_launches for r in read)
    launches = sum(r.kernel_launches for r in read)
    if training > 0:
        return TrainingDetection(
            True, period_seconds, 0.95, EVIDENCE_KERNEL_NAMES,
            f"{training} of {launches} kernel launches are of backward / optimizer kernels "
            f"(multi_tensor_apply) on {len(read)} GPU(s)")
    if any(r.torch_seen for r in read) and launches >= MIN_NAMED_LAUNCHES:
        return TrainingDetection(
            False, 0.0, 0.9, EVIDENCE_KERNEL_NAMES,
            f"PyTorch workload: {launches} kernel launches, none of a backward or optimizer kernel")
    return None


def detect_from_launches(launches: Sequence[LaunchReport]) -> TrainingDetection | None:
    """None when the interceptor never saw a repeating sequence (or never ran)."""
    good = [r for r in launches if r.period_seconds > 0 and r.repeats >= MIN_LAUNCH_REPEATS]
    if not good:
        return None
    weighted = sorted((r.period_seconds, r.repeats) for r in good)
    total = sum(w for _, w in weighted)
    acc, period = 0, weighted[-1][0]
    for p, w in weighted:
        acc += w
        if acc * 2 >= total:
            period = p
            break
    spread = statistics.median(abs(p - period) for p, _ in weighted) / period
    if spread > MAX_LAUNCH_SPREAD:
        # The same kernels repeat, but not on a clock: an inference server answering requests
        # as they come. Not an iteration loop; let the utilisation series decide.
        return None
    most = max(r.repeats for r in good)
    confidence = min(1.0, math.log10(most) / 2.0) * max(0.0, 1.0 - 2.0 * spread)
    return TrainingDetection(
        True, period, round(max(confidence, 0.5), 3), EVIDENCE_LAUNCH,
        f"launch sequence repeated {most} times, median period {period * 1e3:.2f} ms "
        f"over {len(good)} reports (relative spread {spread:.2f})")


@dataclass(frozen=True)
class PlateauShape:
    """What the NVML rule looks at: the longest busy plateau of a utilisation series."""

    samples: int
    busy: bool                # any sample at or above BUSY_RATIO
    duration_seconds: float = 0.0
    level: float = 0.0        # median of the plateau's core (its first and last tenth trimmed)
    mean: float = 0.0
    roughness: float = math.inf  # median step / level within the core
    share: float = 0.0        # of the busy span the plateau covers


@dataclass(frozen=True)
class UtilisationRule:
    """The NVML rule: training iff the longest busy plateau is long, steady, dominant and
    high enough. ``min_level`` was chosen by leave-one-family-out on the H200 corpus
    (``alnair_profiler.evaluation --by-family``): a plateau at a few per cent is a GPU idle
    most of the time whatever drives it, and on those recordings light inference (a request
    stream, inference paced by host pre-processing) sat there as often as training did."""

    min_plateau_seconds: float = MIN_PLATEAU_SECONDS
    max_roughness: float = MAX_PLATEAU_CV
    min_share: float = MIN_PLATEAU_SHARE
    min_level: float = MIN_PLATEAU_LEVEL

    def is_training(self, shape: PlateauShape) -> bool:
        return (shape.busy and shape.duration_seconds >= self.min_plateau_seconds
                and shape.roughness <= self.max_roughness and shape.share >= self.min_share
                and shape.level >= self.min_level)

    def score(self, shape: PlateauShape) -> float:
        """0..1, how clearly the shape passes (used as the confidence either way)."""
        return (min(1.0, shape.duration_seconds / (2 * self.min_plateau_seconds))
                * max(0.0, 1.0 - shape.roughness / (2 * self.max_roughness))
                * min(1.0, shape.share / self.min_share)
                * min(1.0, shape.level / (2 * self.min_level)))


DEFAULT_RULE = UtilisationRule()


def plateau_shape(times: Sequence[float], values: Sequence[float]) -> PlateauShape:
    busy = [i for i, v in enumerate(values) if v >= BUSY_RATIO]
    if len(values) < 5 or not busy:
        return PlateauShape(len(values), bool(busy))
    step = statistics.median(b - a for a, b in zip(times, times[1:], strict=False)) if len(times) > 1 else 0.2
    start, end = _longest_plateau(times, values, step)
    span = times[busy[-1]] - times[busy[0]] + step
    plateau = list(values[start:end + 1])
    trim = len(plateau) // 10
    core = plateau[trim:len(plateau) - trim] if len(plateau) > 4 else plateau
    level = statistics.median(core)
    # Roughness, not the coefficient of variation: a neighbour on a shared GPU finishing
    # shifts the plateau's level once, which must not read as irregular compute.
    steps = [abs(b - a) for a, b in zip(core, core[1:], strict=False)] or [0.0]
    duration = times[end] - times[start] + step
    return PlateauShape(len(values), True, duration, level, statistics.fmean(core),
                        statistics.median(steps) / level if level > 0 else math.inf,
                        duration / span if span > 0 else 0.0)


def detect_from_utilisation(times: Sequence[float], values: Sequence[float],
                            rule: UtilisationRule = DEFAULT_RULE) -> TrainingDetection:
    """Training iff a long, steady plateau of utilisation dominates the busy part of the run."""
    shape = plateau_shape(times, values)
    if shape.samples < 5:
        return TrainingDetection(False, 0.0, 0.3, EVIDENCE_NVML,
                                 f"only {shape.samples} NVML samples; too few to judge")
    if not shape.busy:
        return TrainingDetection(False, 0.0, 0.95, EVIDENCE_NVML,
                                 f"never above {BUSY_RATIO:.0%} utilisation over {shape.samples} samples")
    score = rule.score(shape)
    facts = (f"longest busy plateau {shape.duration_seconds:.1f} s at {shape.level:.0%} median utilisation, "
             f"roughness {shape.roughness:.2f}, {shape.share:.0%} of the busy span")
    if not rule.is_training(shape):
        return TrainingDetection(False, 0.0, round(max(0.5, 1.0 - score), 3), EVIDENCE_NVML, facts)
    step = statistics.median(b - a for a, b in zip(times, times[1:], strict=False))
    start, end = _longest_plateau(times, values, step)
    period, note = _period_from_autocorrelation(values[start:end + 1], step)
    return TrainingDetection(True, period, round(max(0.5, score), 3), EVIDENCE_NVML, f"{facts}; {note}")


def _longest_plateau(times: Sequence[float], values: Sequence[float], step: float) -> tuple[int, int]:
    """Indices of the longest run of busy samples with no gap in time (callers ensure one busy)."""
    best, best_len, run_start = (0, 0), -1.0, None
    for i, v in enumerate(values):
        if v < BUSY_RATIO:
            run_start = None
            continue
        if run_start is None or times[i] - times[i - 1] > MAX_GAP_FACTOR * step:
            run_start = i
        length = times[i] - times[run_start]
        if length > best_len:
            best, best_len = (run_start, i), length
    return best


def _period_from_autocorrelation(plateau: Sequence[float], step: float) -> tuple[float, str]:
    """A period only where a clear autocorrelation peak sits at a lag the sampling resolves."""
    nyquist = 2 * step
    # The middle of the plateau: past warm-up, and bounded so a week-long job's profile is
    # still written within a second of its end.
    if len(plateau) > ACF_WINDOW:
        skip = (len(plateau) - ACF_WINDOW) // 2
        plateau = plateau[skip:skip + ACF_WINDOW]
    n = len(plateau)
    if n < 12:
        return 0.0, "plateau too short for autocorrelation"
    mean = statistics.fmean(plateau)
    dev = [v - mean for v in plateau]
    var = sum(d * d for d in dev)
    if var <= 0:
        return 0.0, f"flat plateau: iteration period below the {nyquist:.2f} s NVML resolution"
    acf = [sum(dev[i] * dev[i + lag] for i in range(n - lag)) / var for lag in range(n // 2)]
    peaks = [lag for lag in range(2, len(acf) - 1)
             if acf[lag] > acf[lag - 1] and acf[lag] >= acf[lag + 1] and acf[lag] > 0.5]
    if len(peaks) < 2:
        return 0.0, f"no autocorrelation peak: iteration period below the {nyquist:.2f} s NVML resolution"
    spacing = statistics.median(b - a for a, b in zip([0, *peaks], peaks, strict=False))
    return spacing * step, f"autocorrelation peaks every {spacing} samples"
