"""The open dataset's recording grid: which runs, with which parameters, limits and co-runners.

A *slot* is what starts at once: one run alone, or two runs sharing the GPU. Compute limits
of a slot add up to at most 100 % (the scheduler places nothing beyond one card). The full
grid (``full_grid()``) has 66 slots, 102 runs:

* alone, ``--gpu-compute 100``: each of the six classes in three variants (sizes, bf16/fp32,
  workers) — 18 runs;
* alone under a limit: each class's base variant at 50 % and at 25 % — 12 runs;
* shared: each of the 15 pairs of distinct classes at 50/50 and at 75/25, and each class with
  a second copy of itself at 50/50 — 36 slots, 72 runs.

Every run does a fixed number of iterations, chosen for about ``WORK_S`` seconds of work on
an H200 under its limit: ``WORK_S / ms`` alone, divided by the expected stretch under a
limit (``100 / C`` for the GPU-bound classes; the host-bound ones, Poisson arrivals and the
DataLoader, are not stretched). ``ms`` is a per-iteration guess from the repo's H200
recordings of similar models; compare runs by ``throughput_per_second``, not by duration.
``--scale`` multiplies every count (the recorder re-fits its time estimates from the runs it
has finished). ``tiny_grid()`` is the ``--sim`` dry run's: the six classes alone plus two
shared slots, CPU sizes.

Estimate per slot (``slot_estimate``), seconds on the H200: ``STARTUP_S`` (``alnair run``,
Python, ``import torch``, CUDA context, model build, exit: 5.5–12 s per run in issue #11's H200
report) plus ``WORK_S``: 12.5 s, 66 slots, ~825 s, two parts of ~413 s. ``alnair up`` to
healthy: 5.1 s on the H200 (that report), 6–15 s in the ``--sim`` runs here (2 busy cores).
So the plan is two commands of ``--deadline 450``; what does not fit is the grid's tail.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

WORK_S = 4.5
STARTUP_S = 8.0  # H200, e2e_share (docs/e2e/h200-2026-11-29): `alnair run` wall minus work, 5.5-12 s
SIM_STARTUP_S = 7.0
MEMORY_GIB = 24
HOST_BOUND = frozenset({"poisson_infer", "dataload_train"})
TAGS = {"cnn_train": "cnn", "lm_train": "lm", "batch_infer": "binf", "poisson_infer": "pinf",
        "dataload_train": "dload", "gnn_train": "gnn"}


@dataclass(frozen=True)
class Config:
    """One workload configuration: the class, its parameters and a per-iteration guess (H200)."""

    workload: str
    ms: float
    params: dict[str, object] = field(default_factory=dict)
    fixed: int = 0
    """Iterations regardless of ``ms`` (the --sim grid's CPU sizes)."""

    def iterations(self, compute_percent: int = 100, scale: float = 1.0) -> int:
        if self.fixed:
            return max(1, round(self.fixed * scale))
        if self.workload == "poisson_infer":  # arrival-bound: WORK_S of requests at --rate
            return max(1, round(WORK_S * float(self.params.get("rate", 100.0)) * scale))  # type: ignore[arg-type]
        stretch = 1.0 if self.workload in HOST_BOUND else 100 / compute_percent
        return max(1, round(WORK_S * 1000 / self.ms / stretch * scale))

    def argv(self, compute_percent: int = 100, scale: float = 1.0) -> list[str]:
        out = [self.workload, "--iterations", str(self.iterations(compute_percent, scale))]
        for key, value in self.params.items():
            out += [f"--{key}", str(value)]
        return out


@dataclass(frozen=True)
class Run:
    run_id: str
    config: Config
    compute_percent: int
    memory_gib: int = MEMORY_GIB


@dataclass(frozen=True)
class Slot:
    runs: tuple[Run, ...]

    @property
    def mode(self) -> str:
        return "alone" if len(self.runs) == 1 else "shared"


# Per class: the base variant first (the one limits and sharing use), then two more.
# ``ms`` per iteration on the H200, estimated from FLOPs and launch counts against issue #11's
# H200 recordings (a 4-conv CNN at batch 64: 3.8 ms; a 2-layer width-256 transformer: 5.6 ms);
# erring high (a run shorter than planned costs less than one longer).
VARIANTS: dict[str, tuple[Config, ...]] = {
    "cnn_train": (Config("cnn_train", 8.0, {"batch": 128, "width": 64, "layers": 2, "image": 32}),
                  Config("cnn_train", 6.0, {"batch": 128, "width": 64, "layers": 2, "image": 32, "precision": "bf16"}),
                  Config("cnn_train", 4.0, {"batch": 32, "width": 32, "layers": 1, "image": 32})),
    "lm_train": (Config("lm_train", 12.0, {"batch": 16, "width": 512, "layers": 4, "seq": 256}),
                 Config("lm_train", 8.0, {"batch": 16, "width": 512, "layers": 4, "seq": 256, "precision": "bf16"}),
                 Config("lm_train", 15.0, {"batch": 16, "width": 1024, "layers": 6, "seq": 256,
                                           "precision": "bf16"})),
    "batch_infer": (Config("batch_infer", 3.5, {"batch": 256, "width": 64, "layers": 2, "image": 32}),
                    Config("batch_infer", 2.5, {"batch": 256, "width": 64, "layers": 2, "image": 32,
                                                "precision": "bf16"}),
                    Config("batch_infer", 1.5, {"batch": 32, "width": 64, "layers": 2, "image": 32})),
    "poisson_infer": (Config("poisson_infer", 10.0, {"rate": 100, "batch": 512, "width": 64}),
                      Config("poisson_infer", 5.0, {"rate": 200, "batch": 128, "width": 64, "precision": "bf16"}),
                      Config("poisson_infer", 20.0, {"rate": 50, "batch": 512, "width": 128})),
    "dataload_train": (Config("dataload_train", 12.0, {"batch": 64, "workers": 4, "width": 64}),
                       Config("dataload_train", 24.0, {"batch": 64, "workers": 2, "width": 64}),
                       Config("dataload_train", 8.0, {"batch": 64, "workers": 8, "width": 64,
                                                      "precision": "bf16"})),
    "gnn_train": (Config("gnn_train", 5.0, {"nodes": 50000, "width": 128, "layers": 2}),
                  Config("gnn_train", 4.0, {"nodes": 50000, "width": 128, "layers": 2, "precision": "bf16"}),
                  Config("gnn_train", 15.0, {"nodes": 100000, "width": 256, "layers": 3})),
}
CLASSES = tuple(VARIANTS)

# The --sim dry run's sizes: seconds of work on a shared CPU, not an H200.
SIM_PARAMS: dict[str, dict[str, object]] = {
    "cnn_train": {"batch": 4, "width": 8, "layers": 1, "image": 32},
    "lm_train": {"batch": 2, "width": 32, "layers": 1, "seq": 32},
    "batch_infer": {"batch": 8, "width": 8, "layers": 1, "image": 32},
    "poisson_infer": {"rate": 20, "batch": 8, "width": 4},
    "dataload_train": {"batch": 4, "workers": 2, "width": 8, "image": 32},
    "gnn_train": {"nodes": 2000, "width": 16, "layers": 1},
}
SIM_ITERATIONS = 40


def _numbered(slots: list[tuple[tuple[Config, int], ...]]) -> list[Slot]:
    out, n = [], 0
    for slot in slots:
        runs = []
        for config, compute in slot:
            n += 1
            suffix = "" if len(slot) == 1 else "s"
            runs.append(Run(f"r{n:03d}-{TAGS[config.workload]}-c{compute}{suffix}", config, compute))
        out.append(Slot(tuple(runs)))
    return out


def full_grid() -> list[Slot]:
    base = {c: v[0] for c, v in VARIANTS.items()}
    alone = [((v, 100),) for c in CLASSES for v in VARIANTS[c][:2]]
    limited = [((base[c], limit),) for limit in (50, 25) for c in CLASSES]
    pairs = [(a, b) for i, a in enumerate(CLASSES) for b in CLASSES[i + 1:]]
    shared = [((base[a], 50), (base[b], 50)) for a, b in pairs]
    shared += [((base[a], 75), (base[b], 25)) for a, b in pairs]
    shared += [((base[c], 50), (base[c], 50)) for c in CLASSES]
    # Interleaved (a round: one alone, one limited, three shared) so that any prefix — a part
    # cut short by its deadline — holds every kind; the third variants (sizes) come last: a
    # cut then costs one run per slot, not two.
    ordered: list[tuple[tuple[Config, int], ...]] = []
    for i in range(len(alone)):
        ordered += [alone[i], limited[i], *shared[3 * i:3 * i + 3]]
    ordered += [((VARIANTS[c][2], 100),) for c in CLASSES]
    return _numbered(ordered)


def tiny_grid() -> list[Slot]:
    """The ``--sim`` grid: every class alone, then two shared slots (one limited 50/50)."""
    cfg = {c: Config(c, 1.0, SIM_PARAMS[c] | {"device": "cpu"}, fixed=SIM_ITERATIONS) for c in CLASSES}
    slots: list[tuple[tuple[Config, int], ...]] = [((cfg[c], 100),) for c in CLASSES]
    slots += [((cfg["cnn_train"], 50), (cfg["poisson_infer"], 50)),
              ((cfg["dataload_train"], 75), (cfg["gnn_train"], 25))]
    return [replace(s, runs=tuple(replace(r, memory_gib=4) for r in s.runs)) for s in _numbered(slots)]


def part_of(slots: list[Slot], part: int, parts: int) -> list[Slot]:
    """Slots of part ``part`` (1-based) of ``parts``: every ``parts``-th slot, so each part holds every kind."""
    if not 1 <= part <= parts:
        raise ValueError(f"--grid-part {part}/{parts}: K must be between 1 and N")
    return slots[part - 1::parts]


def slot_estimate(slot: Slot, sim: bool, scale: float = 1.0) -> float:
    """Seconds from the slot's first `alnair run` to its last exit (a guess until measured)."""
    return (SIM_STARTUP_S + 2.0) if sim else STARTUP_S + WORK_S * scale
