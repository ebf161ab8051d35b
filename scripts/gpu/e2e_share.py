"""Issue #11's end-to-end demonstration: four real workloads share one GPU under Alnair.

One script, run on the GPU machine from the repository root:

1. starts the local platform (``alnair up`` with the interceptor, a private ``--data-dir``,
   NATS ``--port`` and exporter port) and waits until ``alnair status`` says healthy;
2. runs the four workloads of ``e2e_workloads.JOBS`` (CNN training, small transformer
   training, batched Poisson inference, data-loading-heavy training; each a fixed number of
   iterations) with ``alnair run --gpu-memory G --gpu-compute C``, limits adding up to at
   most one GPU, all at once ("shared") and one after the other with the whole GPU each
   ("seq": ``--gpu-compute 100 --gpu-memory <card>``, interceptor loaded, nothing limited),
   interleaved ``--reps`` times;
3. while they share: scrapes the exporter's ``/metrics`` every 0.5 s (per-workload GPU
   utilisation, memory against limit, CUDA counters), samples ``alnair ps`` and tails
   ``alnair events`` (lifecycle);
4. afterwards reads ``alnair profile`` of each shared workload;
5. runs a memory-isolation round: the same four, one asking for more memory than its
   ``--gpu-memory`` must catch ``torch.OutOfMemoryError`` (exit ``OOM_EXIT``) while the three
   others finish normally;
6. writes ``report.md``, ``results.json``, ``utilisation.csv`` and (matplotlib permitting)
   ``utilisation.png`` into ``--out`` after every step, so a run cut short still leaves a
   usable report; stops the platform and every child on exit, SIGTERM, SIGINT or its own
   ``--deadline``.

``--sim`` runs the same orchestration anywhere: a simulated card (``alnair up --gpus
sim:1x80``, no interceptor) and CPU stand-ins of the workloads (``e2e_workloads.py``). Only
the standard library is used here; everything Alnair is reached through the ``alnair`` CLI.

    bash scripts/gpu/repo_env.sh python3 scripts/gpu/e2e_share.py --out "$OUT"     # H200, ~8 min
    .venv/bin/python scripts/gpu/e2e_share.py --sim --reps 1 --out /tmp/e2e          # no GPU, ~40 s
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_observers import Observers  # noqa: E402
from e2e_platform import ROOT, Platform, SetupError  # noqa: E402
from e2e_procs import terminate, wait_gone  # noqa: E402
from e2e_report import job_record, render_report, write_plot  # noqa: E402
from e2e_rounds import Launch, Rounds, stop_launches  # noqa: E402
from e2e_workloads import JOBS  # noqa: E402

# What opendata_record.py uses of this module (it starts the platform through a Demo).
__all__ = ["ROOT", "Demo", "Interrupted", "SetupError", "main", "options", "terminate"]

# Rough durations (s) before one was measured, for --deadline: H200 and the sim stand-ins.
PRIOR_S = {False: {"seq": 100.0, "shared": 45.0, "oom": 35.0, "profiles": 15.0, "teardown": 45.0},
           True: {"seq": 15.0, "shared": 6.0, "oom": 6.0, "profiles": 8.0, "teardown": 15.0}}


class Interrupted(Exception):
    """A signal asked this run to stop; the platform and every child are stopped on the way out."""


class Demo:
    """One run: the platform (``e2e_platform``), what watches it (``e2e_observers``) and the
    rounds (``e2e_rounds``), planned within --deadline; ``results`` is what they record, saved
    as results.json and report.md after every step."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.o = opts
        self.out: Path = opts.out
        self.sim: bool = opts.sim
        self.began = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="alnair-e2e-"))
        self.platform = Platform(opts, self.tmp)
        self.launches: list[Launch] = []
        self.results: dict[str, Any] = {"status": "starting", "mode": "sim" if self.sim else "gpu",
                                        "rounds": [], "profiles": {}, "lifecycle": {}, "windows": {},
                                        "notes": [], "event_counts": {}}
        self.observers = Observers(self.platform, self.out, self.results, self.note)
        self.rounds = Rounds(opts, self.platform, self.observers, self.results, self.launches, self.note,
                             budget=lambda: self.time_left() - PRIOR_S[self.sim]["teardown"])

    # -- what opendata_record.py drives itself (besides .platform and .observers) ----------------

    def environment_start(self) -> dict[str, Any]:
        return self.platform.environment(self.o.commit)

    def check_setup(self) -> None:
        self.results["environment"].update(self.platform.check_modules())
        if not self.sim:
            self.platform.check_gpu()

    def start_platform(self) -> None:
        """`alnair up` healthy, its status saved, and the events tail showing events."""
        self.results["sharing_mode"] = "mps" if self.o.mps else "time-slicing"
        report, record = self.platform.start()
        self.results["platform"] = record
        (self.out / "status.json").write_text(json.dumps(report, indent=2))
        self.observers.start_events()
        print(f"e2e: platform healthy after {record['healthy_after_s']} s", flush=True)

    # -- the plan ----------------------------------------------------------------------------------

    def time_left(self) -> float:
        return self.o.deadline - (time.monotonic() - self.began)

    def estimate(self, kind: str) -> float:
        done = [r["makespan_s"] for r in self.results["rounds"] if r["kind"] == kind and r["makespan_s"]]
        return max(done) * 1.1 if done else PRIOR_S[self.sim][kind]

    def fits(self, kind: str) -> bool:
        need = self.estimate(kind) + PRIOR_S[self.sim]["teardown"]
        if self.time_left() >= need:
            return True
        self.note(f"skipped a {kind} round: {self.time_left():.0f} s left of --deadline {self.o.deadline:g} s, "
                  f"about {need:.0f} s needed")
        return False

    def note(self, text: str) -> None:
        print(f"e2e: {text}", flush=True)
        self.results["notes"].append(text)

    def plan(self) -> list[tuple[str, int]]:
        first = 1 + max((r["rep"] for r in self.results["rounds"]), default=0)
        steps: list[tuple[str, int]] = []
        if self.o.only == "oom":
            return [("oom", first)]
        for rep in range(first, first + self.o.reps):
            if not self.o.skip_seq:
                steps.append(("seq", rep))
            steps.append(("shared", rep))
            if rep == first and not self.results["profiles"]:
                steps.append(("profiles", rep))
            if rep == first and not self.o.skip_oom:
                steps.append(("oom", rep))
        return steps

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        if self.o.append and (self.out / "results.json").exists():
            previous = json.loads((self.out / "results.json").read_text())
            for key in ("rounds", "notes"):
                self.results[key] = previous.get(key, [])
            for key in ("profiles", "lifecycle", "windows", "event_counts"):
                self.results[key] = previous.get(key, {})
        self.results["environment"] = self.environment_start()
        self.results["jobs"] = [job_record(j, self.sim, self.o.scale) for j in JOBS]
        self.results["options"] = {k: str(v) for k, v in vars(self.o).items()}
        self.save()
        self.check_setup()
        self.start_platform()
        self.results["status"] = "running"
        self.save()
        for kind, rep in self.plan():
            if not self.fits(kind):
                continue
            if kind == "profiles":
                if any(x["id"] == f"shared{rep}" for x in self.results["rounds"]):
                    self.rounds.profiles([f"{job.name}-s{rep}" for job in JOBS])
            else:
                self.results["rounds"].append(self.rounds.round(kind, rep))
                if kind == "shared" and f"shared{rep}" in self.results["windows"]:
                    write_plot(self.out, self.results["windows"][f"shared{rep}"], self.results)
            self.save()
        self.results["status"] = "complete"
        failed = [r["id"] for r in self.results["rounds"]
                  if r["ok"] is False or (r["kind"] == "oom" and not r["oom"]["ok"])]
        if failed:
            self.note(f"rounds with a failed workload or verdict: {', '.join(failed)} (exit status 1)")
        return 1 if failed else 0

    def save(self) -> None:
        """results.json and report.md after every step: a run cut short still leaves both."""
        self.results["elapsed_s"] = round(time.monotonic() - self.began, 1)
        tmp = self.out / "results.json.tmp"
        tmp.write_text(json.dumps(self.results, indent=1, default=str))
        tmp.replace(self.out / "results.json")
        (self.out / "report.md").write_text(render_report(self.results))

    # -- teardown ----------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Workloads first (`alnair run` forwards SIGTERM; reapers of any left are signalled by
        their recorded pid), then the events tail, then `alnair up` (SIGTERM: it stops its
        services and NATS); whatever survives is SIGKILLed by group. Verified at the end."""
        stop_launches(self.launches)
        self.platform.stop_reapers()
        self.observers.stop()
        left = self.platform.stop(self.note)
        self.results["teardown"] = {"left_behind_then_killed": left, "clean": not wait_gone(self.platform.ours(), 3)}
        self.platform.keep_logs(self.out)


# --- entry point -----------------------------------------------------------------------------------

def options(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "e2e-share-out"),
                   help="where report.md, results.json, the plot and the logs go (default: $OUT or ./e2e-share-out)")
    p.add_argument("--sim", action="store_true", help="simulated card (sim:1x80) and CPU stand-ins: no GPU needed")
    p.add_argument("--reps", type=int, default=3, help="sequential + shared rounds, interleaved (default 3)")
    p.add_argument("--skip-seq", action="store_true", help="no sequential rounds (no gain or slowdown then)")
    p.add_argument("--skip-oom", action="store_true", help="no memory-isolation round")
    p.add_argument("--only", choices=["oom"], help="only this step (the platform still starts and stops)")
    p.add_argument("--append", action="store_true",
                   help="add to --out's results.json (split a run over several commands)")
    p.add_argument("--deadline", type=float, default=540.0,
                   help="start no step that would end later than this many seconds after start (default 540)")
    p.add_argument("--round-timeout", type=float, default=None,
                   help="stop a round's workloads after this many seconds (default 240; 60 with --sim)")
    p.add_argument("--up-timeout", type=float, default=120.0, help="seconds to wait for `alnair status` healthy")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every job's iterations (quick runs)")
    p.add_argument("--oom-scale", type=float, default=0.8, help="iterations of the memory round, times --scale")
    p.add_argument("--oom-delay", type=float, default=None,
                   help="start the over-asking job this many seconds after the others, so it asks while they "
                        "train (default 8; 0.5 with --sim)")
    p.add_argument("--commit", help="the commit to name in the report where the checkout has no .git")
    p.add_argument("--interceptor", type=Path, default=ROOT / "native/cuda_intercept/build/libalnair_cuda.so")
    p.add_argument("--mps", action="store_true", help="`alnair up --mps`: compute shares as MPS SM partitions")
    p.add_argument("--data-dir", type=Path, default=None, help="the platform's data dir (default: a fresh temp dir)")
    p.add_argument("--keep-data", action="store_true", help="keep the platform's data dir afterwards")
    o = p.parse_args(argv)
    if o.round_timeout is None:
        o.round_timeout = 60.0 if o.sim else 240.0
    if o.oom_delay is None:
        o.oom_delay = 0.5 if o.sim else 8.0
    if o.reps < 1 and o.only is None:
        p.error("--reps must be >= 1")
    o.out = o.out.resolve()
    return o


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    demo = Demo(opts)

    def stop(signum: int, _frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    code = 1
    try:
        code = demo.run()
    except Interrupted as e:
        demo.results["status"] = f"interrupted ({e})"
        demo.note(f"interrupted by {e}: the report holds what finished")
        code = 128 + getattr(signal, str(e), signal.SIGTERM)
    except SetupError as e:
        demo.results["status"] = "setup failed"
        demo.note(f"setup failed: {e}")
        print(f"e2e: error: {e}", file=sys.stderr, flush=True)
        code = 2
    except Exception as e:
        demo.results["status"] = f"failed ({type(e).__name__})"
        demo.note(f"failed: {type(e).__name__}: {e}")
        raise
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        try:
            demo.teardown()
        finally:
            demo.save()
            print(f"e2e: {demo.results['status']}; report in {opts.out / 'report.md'}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
