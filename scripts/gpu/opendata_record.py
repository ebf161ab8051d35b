"""Records the open dataset (issue #20): a grid of real workloads through Alnair, one GPU.

On the GPU machine, from the repository root:

1. starts the local platform exactly as ``e2e_share.py`` does (its ``Demo``: ``alnair up``
   with NVML and the interceptor, a private data dir, ports of its own; its checks, its
   environment record and its teardown, which stops every process this run started);
2. runs the slots of ``opendata_grid`` (one run alone, or two sharing the GPU), each run its
   own ``alnair run --name RUN --gpu-compute C --gpu-memory G -- opendata_workloads.py ...``,
   a slot after the previous one's runs have exited;
3. every second scrapes the exporter's ``/metrics`` (every per-workload and device series in
   ``alnair_opendata.SERIES``) and reads ``/proc`` of each workload's process tree and its
   iteration count;
4. as soon as a run exits writes ``series/<run_id>.csv.gz``; then, once ``alnair profile
   RUN --json`` answers (read while the next slot runs) or ``--profile-wait`` has passed,
   appends its summary row (labels + ``alnair_opendata.features``) to ``runs.jsonl``.

A run cut off by ``--deadline`` or a signal leaves every finished run in place; ``--resume``
skips the runs ``runs.jsonl`` holds. ``--grid-part K/N`` takes every N-th slot; ``--only``
names runs; ``--list`` prints the plan with its time estimate and exits.

    bash scripts/gpu/repo_env.sh python3 scripts/gpu/opendata_record.py --out "$OUT" --grid-part 1/2
    .venv/bin/python scripts/gpu/opendata_record.py --sim --out /tmp/od-sim        # no GPU, ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import e2e_share  # noqa: E402
from e2e_report import profile_summary  # noqa: E402
from opendata_grid import WORK_S, Run, Slot, full_grid, part_of, slot_estimate, tiny_grid  # noqa: E402
from opendata_series import TruthCounter, read_pid, read_scrape, tree_usage, write_series  # noqa: E402
from opendata_workloads import RESULT_PREFIX, TRAINING  # noqa: E402

from alnair_opendata import SERIES_NAMES, features  # noqa: E402

PERIOD_S = 1.0
MAX_WORK_FACTOR = 3.0  # a run's work is stopped at this many times the planned WORK_S
# Loaded once while `alnair up` starts, outside any run: the first run then does not pay for
# a cold page cache and the CUDA libraries' first load (issue #11's first H200 run: +9 s).
WARM_UP = ("import torch; x = torch.randn(64, 3, 32, 32, device='cuda'); "
           "torch.nn.functional.conv2d(x, torch.randn(8, 3, 3, 3, device='cuda')).sum().item(); "
           "(x.flatten(1) @ x.flatten(1).T).sum().item()")
PROFILE_RETRY_S = 1.5  # the profile is written shortly after the run ends; ask again after this
TEARDOWN_S = {False: 30.0, True: 20.0}


@dataclass
class Active:
    run: Run
    slot: Slot
    log: Path
    pid_file: Path
    truth: TruthCounter
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ended: float | None = None
    exit: int | None = None
    timed_out: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Pending:
    """A finished run waiting for its profile before its summary row is written."""

    active: Active
    labels: dict[str, Any]
    give_up_at: float
    proc: subprocess.Popen[bytes] | None = None
    answer: Path | None = None
    next_try: float = 0.0


class Recorder:
    def __init__(self, o: argparse.Namespace) -> None:
        self.o = o
        self.out: Path = o.out
        self.began = time.monotonic()
        demo_argv = ["--out", str(self.out / "platform"), "--interceptor", str(o.interceptor),
                     "--deadline", str(o.deadline)] + (["--sim"] if o.sim else [])
        self.demo = e2e_share.Demo(e2e_share.options(demo_argv))
        self.pending: list[Pending] = []
        self.slot_times: list[tuple[float, float]] = []  # (estimate, measured)
        self.notes: list[str] = []
        self.meta: dict[str, Any] = {}

    # -- plan ------------------------------------------------------------------------------------

    def plan(self) -> list[Slot]:
        slots = tiny_grid() if self.o.sim else full_grid()
        if self.o.grid_part:
            k, n = self.o.grid_part
            slots = part_of(slots, k, n)
        if self.o.only:
            wanted = set(self.o.only)
            slots = [s for s in slots if any(r.run_id in wanted for r in s.runs)]
        return slots

    def done_ids(self) -> set[str]:
        path = self.out / "runs.jsonl"
        if not path.exists():
            return set()
        return {json.loads(line)["run_id"] for line in path.read_text().splitlines() if line.strip()}

    def forget(self, run_ids: set[str]) -> None:
        path = self.out / "runs.jsonl"
        keep = [line for line in path.read_text().splitlines() if line.strip()
                and json.loads(line)["run_id"] not in run_ids]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(path)

    def estimate(self, slot: Slot) -> float:
        prior = slot_estimate(slot, self.o.sim, self.o.scale)
        if not self.slot_times:
            return prior
        return prior * statistics.median(m / e for e, m in self.slot_times)

    def time_left(self) -> float:
        return self.o.deadline - (time.monotonic() - self.began)

    def note(self, text: str) -> None:
        print(f"opendata: {text}", flush=True)
        self.notes.append(text)

    # -- the recording -------------------------------------------------------------------------------

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "series").mkdir(exist_ok=True)
        (self.out / "profiles").mkdir(exist_ok=True)
        (self.out / "logs").mkdir(exist_ok=True)
        done = self.done_ids()
        if done and not self.o.resume:
            raise e2e_share.SetupError(f"{self.out / 'runs.jsonl'} already holds {len(done)} runs: pass --resume "
                                       "to add the missing ones, or a new --out")
        slots = [s for s in self.plan() if not all(r.run_id in done for r in s.runs)]
        half = {r.run_id for s in slots for r in s.runs if r.run_id in done}
        if half:  # a pair cut in the middle: its finished half is recorded again beside its partner
            self.forget(half)
            self.note(f"--resume: {', '.join(sorted(half))} recorded again (their co-runner was cut off)")
        total = sum(slot_estimate(s, self.o.sim, self.o.scale) for s in slots)
        print(f"opendata: {len(slots)} slots, {sum(len(s.runs) for s in slots)} runs to record, about "
              f"{total:.0f} s of slots (+ start-up and teardown); deadline {self.o.deadline:g} s", flush=True)
        if self.o.list:
            for s in slots:
                print(f"  {slot_estimate(s, self.o.sim, self.o.scale):5.1f} s  {s.mode:6}  " + " | ".join(
                    f"{r.run_id} C{r.compute_percent} {' '.join(r.config.argv(r.compute_percent, self.o.scale))}"
                    for r in s.runs))
            return 0
        demo = self.demo
        demo.out.mkdir(parents=True, exist_ok=True)
        demo.results["environment"] = demo.environment_start()
        if self.o.sim:  # e2e_share's label says stand-ins; here real torch runs on the CPU
            demo.results["environment"].update(gpu="SIMULATED (sim:1x80, no GPU; workloads on the CPU)",
                                               torch="see workload_torch")
        demo.check_setup()
        up = time.monotonic()
        warm = None if self.o.sim else subprocess.Popen([sys.executable, "-c", WARM_UP], cwd=e2e_share.ROOT,
                                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        demo.start_platform()
        if warm is not None:
            try:
                warm.wait(max(1.0, 60 - (time.monotonic() - up)))
            except subprocess.TimeoutExpired:
                e2e_share.terminate(warm, 5)  # type: ignore[arg-type]
                self.note("the torch/CUDA warm-up took over 60 s: stopped (the first run starts cold)")
        previous = None
        if self.o.resume and (self.out / "meta.json").is_file():
            previous = json.loads((self.out / "meta.json").read_text())  # the earlier command's record, kept
        part = "/".join(map(str, self.o.grid_part)) if self.o.grid_part else ("rest" if done else "all")
        self.meta = {"environment": demo.results["environment"], "platform": demo.results.get("platform"),
                     "startup_s": round(time.monotonic() - up, 2), "sim": self.o.sim, "grid_part": part,
                     "previous": previous,
                     "options": {k: str(v) for k, v in vars(self.o).items()}, "notes": self.notes}
        self.save_meta()
        for slot in slots:
            need = self.estimate(slot) + TEARDOWN_S[self.o.sim]
            if self.time_left() < need:
                self.note(f"deadline: {self.time_left():.0f} s left, a slot needs about {need:.0f} s; "
                          f"{len(slots) - slots.index(slot)} slots not recorded (--resume records them)")
                break
            self.run_slot(slot)
            self.save_meta()
        self.drain(final=True)
        self.save_meta()
        return 0

    def launch(self, a: Active) -> None:
        run = a.run
        argv = [sys.executable, str(HERE / "opendata_workloads.py"), *run.config.argv(run.compute_percent,
                                                                                      self.o.scale),
                "--pid-file", str(a.pid_file), "--truth-file", str(a.truth.path)]
        if not self.o.sim:  # a guess of ms per iteration far off must not eat the part's budget
            argv += ["--max-work-seconds", f"{MAX_WORK_FACTOR * WORK_S * self.o.scale:g}"]
        a.pid_file.unlink(missing_ok=True)
        a.truth.path.unlink(missing_ok=True)
        cmd = self.demo.platform.alnair("run", "--name", run.run_id, "--gpu-memory", str(run.memory_gib),
                               "--gpu-compute", str(run.compute_percent), "--", *argv)
        a.started = time.time()
        a.proc = self.demo.platform.spawn(cmd, a.log)
        self.demo.launches.append(a)  # type: ignore[arg-type]  # its teardown stops a.proc

    def run_slot(self, slot: Slot) -> None:
        work = self.demo.tmp / "work"
        work.mkdir(exist_ok=True)
        actives = [Active(r, slot, self.out / "logs" / f"{r.run_id}.log", work / f"{r.run_id}.pid",
                          TruthCounter(work / f"{r.run_id}.truth")) for r in slot.runs]
        estimate = self.estimate(slot)
        timeout = min(max(60.0, 4 * estimate), max(10.0, self.time_left() - TEARDOWN_S[self.o.sim]))
        print(f"opendata: slot {' + '.join(r.run_id for r in slot.runs)} (about {estimate:.0f} s)", flush=True)
        began = time.time()
        for a in actives:
            self.launch(a)
        next_sample = time.time()
        while any(a.ended is None for a in actives):
            now = time.time()
            for a in actives:
                if a.ended is None and a.proc is not None and a.proc.poll() is not None:
                    self.sample([a], now)  # the last iterations and counters, as the run ends
                    a.ended, a.exit = now, a.proc.returncode
                    self.finish(a, actives)
            if now >= next_sample:
                next_sample = now + PERIOD_S
                self.sample([a for a in actives if a.ended is None], now)
            if now - began > timeout:
                for a in actives:
                    if a.ended is None and a.proc is not None:
                        a.timed_out = True
                        e2e_share.terminate(a.proc, 10)
                        a.ended, a.exit = time.time(), a.proc.returncode
                        self.finish(a, actives)
                self.note(f"slot {slot.runs[0].run_id}: stopped after {timeout:.0f} s")
            self.drain()
            self.demo.observers.tick()
            time.sleep(0.05)
        self.slot_times.append((slot_estimate(slot, self.o.sim, self.o.scale), time.time() - began))

    def sample(self, actives: list[Active], now: float) -> None:
        if not actives:
            return
        try:
            with urllib.request.urlopen(self.demo.platform.metrics_url, timeout=0.8) as r:
                pods, device = read_scrape(r.read().decode())
        except OSError as e:
            pods, device = {}, {}
            self.note(f"scrape failed at {now:.0f}: {e}")
        for a in actives:
            row: dict[str, Any] = {"t_s": round(now - a.started, 3), **device, **pods.get(a.run.run_id, {})}
            pid = read_pid(a.pid_file)
            usage = tree_usage(pid) if pid else None
            if usage:
                row.update(usage)
            row["iterations_total"] = a.truth.count_at(now)
            a.rows.append(row)

    def finish(self, a: Active, actives: list[Active]) -> None:
        """The run's series now; its summary row once its profile is in (see ``drain``)."""
        write_series(self.out / "series" / f"{a.run.run_id}.csv.gz", SERIES_NAMES, a.rows)
        others = [x for x in actives if x is not a]
        self.pending.append(Pending(a, self.labels(a, others[0] if others else None),
                                    time.monotonic() + self.o.profile_wait))

    def labels(self, a: Active, co: Active | None) -> dict[str, Any]:
        p = a.run.config.params
        text = a.log.read_text(errors="replace") if a.log.exists() else ""
        result = re.findall(rf"^{RESULT_PREFIX} .*$", text, re.M)
        got = dict(re.findall(r"(\w+)=([\w.+]+)", result[-1])) if result else {}
        env = self.meta.get("environment", {})
        if "torch" in got and "workload_torch" not in env:  # what the workloads ran (the sim's probe has none)
            env["workload_torch"] = f"{got['torch']} ({got.get('device', '?')})"
        return {
            "run_id": a.run.run_id, "part": self.meta.get("grid_part", "all"), "workload": a.run.config.workload,
            "is_training": TRAINING[a.run.config.workload], "batch": int(p.get("batch", 64)),  # type: ignore[arg-type]
            "width": int(p.get("width", 64)), "layers": int(p.get("layers", 2)),  # type: ignore[arg-type]
            "precision": str(p.get("precision", "fp32")), "workers": int(p.get("workers", 0)),  # type: ignore[arg-type]
            "rate": float(p.get("rate", 0.0)) if a.run.config.workload == "poisson_infer" else 0.0,  # type: ignore[arg-type]
            "iterations": a.run.config.iterations(a.run.compute_percent, self.o.scale),
            "compute_percent": a.run.compute_percent, "memory_gib": a.run.memory_gib, "mode": a.slot.mode,
            "co_runner": co.run.config.workload if co else "", "co_runner_run_id": co.run.run_id if co else "",
            "co_runner_compute_percent": co.run.compute_percent if co else 0, "gpu": env.get("gpu", "?"),
            "exit_code": a.exit, "timed_out": a.timed_out,
            "wall_s": round((a.ended or time.time()) - a.started, 3),
            "setup_s": float(got["setup_seconds"]) if "setup_seconds" in got else None,
            "work_s": float(got["work_seconds"]) if "work_seconds" in got else None,
            "iterations_done": int(got["iterations"]) if "iterations" in got else None,
            "torch_peak_bytes": float(got["torch_peak_bytes"]) if "torch_peak_bytes" in got else None,
        }

    def drain(self, final: bool = False) -> None:
        """Ask for profiles (one `alnair profile` at a time) and write the rows that are ready."""
        end = time.monotonic()
        if final:  # the last profiles, but never past the deadline (teardown still has to fit)
            end = min(max((p.give_up_at for p in self.pending), default=end), end + max(0.0, self.time_left() - 15))
        while True:
            for p in list(self.pending):
                if p.proc is not None and p.proc.poll() is not None:
                    ok = p.proc.returncode == 0
                    p.proc, p.next_try = None, time.monotonic() + PROFILE_RETRY_S
                    if ok and self.take_profile(p):
                        continue
                if p.proc is None and time.monotonic() >= p.give_up_at:
                    self.write_row(p, None)
            waiting = [p for p in self.pending if p.proc is None and time.monotonic() >= p.next_try]
            if waiting and not any(p.proc is not None for p in self.pending):
                p = waiting[0]
                p.answer = self.demo.tmp / f"profile-{p.active.run.run_id}.json"
                platform = self.demo.platform
                with open(p.answer, "wb") as f:
                    p.proc = subprocess.Popen(platform.alnair("profile", p.active.run.run_id, "--json"), stdout=f,
                                              stderr=subprocess.DEVNULL, env=platform.cli_env, cwd=e2e_share.ROOT)
            if not final or not self.pending:
                return
            if time.monotonic() > end:
                self.write_pending()
                return
            time.sleep(0.2)

    def write_pending(self) -> None:
        """Rows of finished runs still waiting for a profile, without it (deadline, signal)."""
        for p in list(self.pending):
            if p.proc is not None:
                e2e_share.terminate(p.proc, 5)  # type: ignore[arg-type]
            self.write_row(p, None)

    def take_profile(self, p: Pending) -> bool:
        try:
            doc = json.loads(p.answer.read_text()) if p.answer else {}
        except (OSError, ValueError):
            return False
        work = (doc.get("workloads") or [None])[0]
        if not work:
            return False
        (self.out / "profiles" / f"{p.active.run.run_id}.json").write_text(json.dumps(doc, indent=1))
        self.write_row(p, profile_summary(work))
        return True

    def write_row(self, p: Pending, prof: dict[str, Any] | None) -> None:
        row = dict(p.labels)
        row.update({
            "profile_is_training": prof.get("is_training") if prof else None,
            "profile_period_s": prof.get("period_s") if prof else None,
            "profile_confidence": prof.get("confidence") if prof else None,
            "profile_evidence": prof.get("evidence") if prof else None,
            "profile_predicted_peak_bytes": prof.get("predicted_peak_gpu_memory_bytes") if prof else None,
            "profile_gpu_util_max": prof["gpu_util"]["max"] if prof else None,
            "profile_gpu_memory_max": prof["gpu_memory"]["max"] if prof else None,
        })
        row.update(features(p.active.rows) if p.active.rows else {})
        with open(self.out / "runs.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        self.pending.remove(p)
        print(f"opendata: {row['run_id']} exit {row['exit_code']}, {len(p.active.rows)} samples, "
              f"profile {'read' if prof else 'NOT read'}", flush=True)

    def save_meta(self) -> None:
        self.meta["elapsed_s"] = round(time.monotonic() - self.began, 1)
        self.meta["slot_times"] = self.slot_times
        tmp = self.out / "meta.json.tmp"
        tmp.write_text(json.dumps(self.meta, indent=1, default=str))
        tmp.replace(self.out / "meta.json")


def _part(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"--grid-part {text!r}: give K/N with 1 <= K <= N, e.g. 1/2")
    return int(m.group(1)), int(m.group(2))


def options(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "opendata-out"))
    p.add_argument("--sim", action="store_true", help="simulated card, the tiny grid on the CPU: no GPU needed")
    p.add_argument("--grid-part", type=_part, help="K/N: every N-th slot of the grid, starting at the K-th")
    p.add_argument("--only", type=lambda s: [x for x in s.split(",") if x], help="comma-separated run ids")
    p.add_argument("--deadline", type=float, default=450.0,
                   help="start no slot that would end (with teardown) later than this many seconds (default 450)")
    p.add_argument("--resume", action="store_true", help="add to --out, skipping the runs runs.jsonl holds")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every run's iterations")
    p.add_argument("--profile-wait", type=float, default=20.0, help="seconds to wait for a run's profile")
    p.add_argument("--list", action="store_true", help="print the plan and its estimate, start nothing")
    p.add_argument("--interceptor", type=Path, default=e2e_share.ROOT / "native/cuda_intercept/build/libalnair_cuda.so")
    o = p.parse_args(argv)
    if o.scale <= 0:
        p.error(f"--scale must be > 0, got {o.scale}")
    o.out = o.out.resolve()
    return o


def _interrupt(signum: int, _frame: Any) -> None:
    raise e2e_share.Interrupted(signal.Signals(signum).name)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str] | None = None) -> int:
    """A signal stops the recording like the deadline does: finished runs stay, then teardown."""
    o = options(argv)
    rec = Recorder(o)
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
    code = 1
    try:
        code = rec.run()
    except e2e_share.Interrupted as e:
        rec.note(f"interrupted by {e}: finished runs are kept (--resume records the rest)")
        code = 128 + int(getattr(signal, str(e), signal.SIGTERM))
    except e2e_share.SetupError as e:
        print(f"opendata: error: {e}", file=sys.stderr, flush=True)
        code = 2
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # teardown is not to be cut short
        rec.write_pending()
        if o.list:
            shutil.rmtree(rec.demo.tmp, ignore_errors=True)  # the platform's temp dir, never used
        else:
            try:
                rec.demo.teardown()
            finally:
                if rec.meta:
                    rec.meta["teardown"] = rec.demo.results.get("teardown")
                    rec.save_meta()
    return code


if __name__ == "__main__":
    sys.exit(main())
