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
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_procs import (  # noqa: E402
    alive,
    ancestors,
    die_with_parent,
    free_port,
    processes_mentioning,
    signal_group,
    terminate,
    wait_gone,
)
from e2e_report import (  # noqa: E402
    PS_PERIOD_S,
    SAMPLE_PERIOD_S,
    job_record,
    lifecycle_entry,
    parse_exposition,
    parse_ps_table,
    per_workload,
    profile_summary,
    redact,
    render_report,
    summarise_window,
    write_plot,
)
from e2e_workloads import JOBS, OOM_EXIT, Job  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIM_GPUS = "sim:1x80"
# Rough durations (s) before one was measured, for --deadline: H200 and the sim stand-ins.
PRIOR_S = {False: {"seq": 100.0, "shared": 45.0, "oom": 35.0, "profiles": 15.0, "teardown": 45.0},
           True: {"seq": 15.0, "shared": 6.0, "oom": 6.0, "profiles": 8.0, "teardown": 15.0}}

_IMPORT_PROBE = """
import importlib, json, sys
missing, versions = [], {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
    except Exception as e:
        missing.append(f"{name} ({type(e).__name__}: {e})")
    else:
        if name == "torch":
            versions = {"torch": module.__version__, "torch_cuda": str(module.version.cuda)}
print(json.dumps({"missing": missing, "versions": versions}))
"""


class Interrupted(Exception):
    """A signal asked this run to stop; the platform and every child are stopped on the way out."""


class SetupError(Exception):
    """The run cannot start (missing interceptor, modules or GPU); the message says what to do."""


# --- the run ----------------------------------------------------------------------------------

@dataclass
class Launch:
    job: Job
    name: str
    memory_gib: int
    compute_percent: int
    argv: list[str]
    log: Path
    delay: float = 0.0
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ended: float | None = None
    exit: int | None = None
    timed_out: bool = False

    def result(self) -> dict[str, Any]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        parsed = dict(re.findall(r"(\w+)=([\d.]+)", (re.findall(r"^E2E_RESULT .*$", text, re.M) or [""])[-1]))
        oom = re.findall(r"^E2E_OOM .*$", text, re.M)
        return {"job": self.job.name, "workload": self.name, "memory_gib": self.memory_gib, "delay_s": self.delay,
                "compute_percent": self.compute_percent, "exit": self.exit, "timed_out": self.timed_out,
                "started_at": self.started, "wall_s": (self.ended - self.started) if self.ended else None,
                "iterations": int(float(parsed["iterations"])) if "iterations" in parsed else None,
                "work_s": float(parsed["work_seconds"]) if "work_seconds" in parsed else None,
                "oom_caught": oom[-1] if oom else None,
                "no_oom": bool(re.search(r"^E2E_NO_OOM", text, re.M)),
                "log": str(self.log)}


@dataclass
class Window:
    """What is recorded while one round's workloads share the GPU."""

    round_id: str
    names: set[str]
    snapshot: bool
    t0: float
    samples: list[dict[str, Any]] = field(default_factory=list)
    ps: list[dict[str, Any]] = field(default_factory=list)
    scrape_saved: bool = False
    last_scrape: str = ""
    release: Path | None = None
    """With --sim, the file the round's stand-ins wait for after their work: written once the
    round's picture (`alnair ps` and a /metrics scrape) is taken, or when the round ends."""

    def release_if_pictured(self, ps_saved: bool) -> None:
        if self.release is not None and ps_saved and self.scrape_saved:
            self.release.touch()


class Demo:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.o = opts
        self.out: Path = opts.out
        self.sim: bool = opts.sim
        self.began = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="alnair-e2e-"))
        self.data_dir: Path = opts.data_dir.resolve() if opts.data_dir else self.tmp / "alnair"
        self.port, self.metrics_port = free_port(), free_port()
        self.cli_env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
        self.cli_env.update(COLUMNS="200", PYTHONUNBUFFERED="1", NO_COLOR="1")
        self.up: subprocess.Popen[bytes] | None = None
        self.events: subprocess.Popen[bytes] | None = None
        self.events_raw = self.tmp / "events.raw"
        self.events_offset = 0
        self.launches: list[Launch] = []
        self.window: Window | None = None
        self.next_scrape = self.next_ps = 0.0
        self.ps_proc: tuple[subprocess.Popen[bytes], Path] | None = None
        self.card_gib = 80
        self.results: dict[str, Any] = {"status": "starting", "mode": "sim" if self.sim else "gpu",
                                        "rounds": [], "profiles": {}, "lifecycle": {}, "windows": {},
                                        "notes": [], "event_counts": {}}

    # -- the CLI ---------------------------------------------------------------------------------

    def alnair(self, verb: str, *args: str) -> list[str]:
        return [sys.executable, "-m", "alnair_cli", verb, "--data-dir", str(self.data_dir), *args]

    def call(self, verb: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.alnair(verb, *args), capture_output=True, text=True, timeout=timeout,
                              env=self.cli_env, cwd=ROOT)

    def spawn(self, argv: list[str], out: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(out, "ab") as f:
            return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env or self.cli_env, cwd=ROOT, start_new_session=True,
                                    preexec_fn=die_with_parent)

    # -- platform ------------------------------------------------------------------------------

    def check_setup(self) -> None:
        if self.o.data_dir is not None and self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise SetupError(f"--data-dir {self.data_dir} is not empty: give a new directory (what mentions it "
                             "is stopped at the end, so it must be this run's alone)")
        modules = ["alnair_cli.__main__", "alnair_profiler", "alnair_exporter", "alnair_local_agent",
                   "alnair_scheduler", "alnair_elastic_job", "alnair_cache_hydrator", "montydb", "pymongo", "httpx"]
        if not self.sim:
            modules += ["pynvml", "torch"]
        done = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, *modules], capture_output=True, text=True,
                              env=self.cli_env, cwd=ROOT, timeout=180)
        try:
            found = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            found = {"missing": [done.stderr.strip()[-500:]]}
        if found["missing"]:
            raise SetupError(f"cannot import {'; '.join(found['missing'])}: carry the wheels listed in "
                             "scripts/gpu/README.md (.whl/) and run through scripts/gpu/repo_env.sh")
        self.results["environment"].update(found.get("versions", {}))
        if self.sim:
            return
        lib = self.o.interceptor
        if not lib.is_file():
            print(f"e2e: {lib} missing; building it (make -C native/cuda_intercept)", flush=True)
            subprocess.run(["make", "-C", str(ROOT / "native" / "cuda_intercept")], check=False, timeout=300)
            if not lib.is_file():
                raise SetupError(f"--interceptor {lib}: no such file and `make -C native/cuda_intercept` did not "
                                 "build it")
        smi = self._smi("--query-gpu=memory.total", "--format=csv,noheader,nounits")
        if not smi:
            raise SetupError("nvidia-smi found no GPU (use --sim to try the orchestration without one)")
        self.card_gib = int(float(smi.splitlines()[0]) // 1024)

    def _smi(self, *args: str) -> str:
        try:
            return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    def start_platform(self) -> None:
        argv = self.alnair("up", "--port", str(self.port))
        argv += ["--gpus", SIM_GPUS] if self.sim else ["--interceptor", str(self.o.interceptor.resolve())]
        argv += ["--mps"] if self.o.mps else []
        self.results["sharing_mode"] = "mps" if self.o.mps else "time-slicing"
        env = {**self.cli_env, "ALNAIR_METRICS_PORT": str(self.metrics_port),
               "ALNAIR_SAMPLE_PERIOD_SECONDS": str(SAMPLE_PERIOD_S)}
        print(f"e2e: alnair up ({'simulated ' + SIM_GPUS if self.sim else 'interceptor ' + str(self.o.interceptor)}"
              f", data {self.data_dir}, NATS port {self.port}, metrics port {self.metrics_port})", flush=True)
        started = time.monotonic()
        self.up = self.spawn(argv, self.tmp / "up.log", env)
        deadline = started + self.o.up_timeout
        while True:
            if self.up.poll() is not None:
                raise SetupError(f"alnair up exited {self.up.returncode}: {self._tail(self.tmp / 'up.log')}")
            done = self.call("status", "--json", timeout=30)
            if done.returncode == 0:
                report = json.loads(done.stdout)
                break
            if time.monotonic() > deadline:
                raise SetupError(f"alnair status not healthy after {self.o.up_timeout:g} s: {done.stdout[-800:]}")
            time.sleep(1.0)
        self.results["platform"] = {"healthy_after_s": round(time.monotonic() - started, 2),
                                    "services": [s["name"] for s in report.get("services", [])],
                                    "metrics_url": self.metrics_url, "gpus": SIM_GPUS if self.sim else "NVML",
                                    "interceptor": None if self.sim else str(self.o.interceptor)}
        (self.out / "status.json").write_text(json.dumps(report, indent=2))
        self.events = self.spawn(self.alnair("events", "--subject", "alnair.>"), self.events_raw)
        # Live once it prints: the exporter publishes a sample every period, so that is soon.
        deadline = time.monotonic() + 60
        while not self.results["event_counts"] and time.monotonic() < deadline and self.events.poll() is None:
            self.pump(0.2)
        if not self.results["event_counts"]:
            self.note(f"`alnair events` showed nothing within 60 s (exit {self.events.poll()}): lifecycle may be "
                      "incomplete")
        print(f"e2e: platform healthy after {self.results['platform']['healthy_after_s']} s", flush=True)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @staticmethod
    def _tail(path: Path, n: int = 1500) -> str:
        try:
            return path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # -- what runs beside the workloads -----------------------------------------------------------------

    def tick(self) -> None:
        """One pass of the observers: events tail, /metrics scrape and `alnair ps` when due."""
        self._ingest_events()
        w, now = self.window, time.time()
        if w is None:
            return
        if now >= self.next_scrape:
            self.next_scrape = now + SAMPLE_PERIOD_S
            self._scrape(w, now)
        if self.ps_proc is not None and self.ps_proc[0].poll() is not None:
            self._ps_done(w, *self.ps_proc)
            self.ps_proc = None
        w.release_if_pictured("ps_table" in self.results)
        if self.ps_proc is None and now >= self.next_ps:
            self.next_ps = now + PS_PERIOD_S
            path = self.tmp / "ps.txt"
            path.unlink(missing_ok=True)
            with open(path, "wb") as f:
                self.ps_proc = (subprocess.Popen(self.alnair("ps"), stdout=f, stderr=subprocess.DEVNULL,
                                                 env=self.cli_env, cwd=ROOT), path)

    def _scrape(self, w: Window, now: float) -> None:
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=1.0) as r:
                text = r.read().decode()
        except OSError as e:
            w.samples.append({"t": now - w.t0, "error": str(e)})
            return
        w.last_scrape = text
        pods, device = per_workload(parse_exposition(text))
        w.samples.append({"t": now - w.t0, "pods": {n: v for n, v in pods.items() if n in w.names},
                          "device": device})
        seen = {n for n, v in pods.items()
                if n in w.names and ("gpu_util_percent" in v or "cuda_memory_used_bytes" in v)}
        if w.snapshot and not w.scrape_saved and (w.names <= seen or (self.sim and len(w.samples) >= 4)):
            (self.out / "metrics_scrape.txt").write_text(text)
            w.scrape_saved = True

    def _ps_done(self, w: Window, proc: subprocess.Popen[bytes], path: Path) -> None:
        """One `alnair ps` table: its rows of this round kept; the first showing all of them
        running on a card is saved as the round's picture (text and parsed rows)."""
        try:
            text = path.read_text()
        except OSError:
            return
        rows = [r for r in parse_ps_table(text) if r.get("name") in w.names]
        w.ps.append({"t": round(time.time() - w.t0, 2), "rows": rows})
        running = {r["name"] for r in rows if r.get("state") == "running" and r.get("gpu", "-") != "-"}
        if w.snapshot and running == w.names and "ps_table" not in self.results:
            (self.out / "ps_shared.txt").write_text(text)
            (self.out / "ps_shared.json").write_text(json.dumps(rows, indent=2))
            self.results["ps_table"] = text

    def _ingest_events(self) -> None:
        try:
            with open(self.events_raw, "rb") as f:
                f.seek(self.events_offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        if not end:
            return
        self.events_offset += end
        counts, now = self.results["event_counts"], time.time()
        with open(self.out / "events.log", "a") as log:
            for raw in data[:end].decode(errors="replace").splitlines():
                subject = raw.split(" ", 2)[1] if raw.count(" ") >= 2 else "?"
                kind = ".".join(subject.split(".")[:3]) if subject.startswith("alnair.metrics.") else subject
                counts[kind] = counts.get(kind, 0) + 1
                if subject.startswith("alnair.metrics."):
                    continue  # a sample every 0.5 s: counted, not kept
                log.write(redact(raw) + "\n")
                entry = lifecycle_entry(raw, now)
                if entry:
                    name, phase, at, code = entry
                    self.results["lifecycle"].setdefault(name, []).append(
                        {"phase": phase, "at": at, **({"exit": code} if code is not None else {})})

    # -- rounds ----------------------------------------------------------------------------------

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.tick()
            time.sleep(0.1)

    def run_together(self, launches: list[Launch], timeout: float) -> None:
        """Start them at once and wait for all; past ``timeout`` (or what --deadline leaves)
        the ones still going are stopped and marked timed out."""
        left = self.time_left() - PRIOR_S[self.sim]["teardown"]
        if left < timeout:
            timeout = max(10.0, left)
        began = time.monotonic()
        deadline = began + timeout
        while any(la.ended is None for la in launches):
            for la in launches:
                if la.proc is None and time.monotonic() >= began + la.delay:
                    self._launch(la)
            for la in launches:
                if la.ended is None and la.proc is not None and la.proc.poll() is not None:
                    la.ended, la.exit = time.time(), la.proc.returncode
            if time.monotonic() > deadline:
                for la in launches:
                    if la.ended is None:
                        la.timed_out = True
                        la.started = la.started or time.time()
                        self._stop_launch(la)
                        la.ended, la.exit = time.time(), la.proc.returncode if la.proc else None
                break
            self.tick()
            time.sleep(0.05)

    def _launch(self, la: Launch) -> None:
        la.log.parent.mkdir(parents=True, exist_ok=True)
        argv = self.alnair("run", "--name", la.name, "--gpu-memory", str(la.memory_gib),
                           "--gpu-compute", str(la.compute_percent), "--", *la.argv)
        la.started = time.time()
        la.proc = self.spawn(argv, la.log)
        self.launches.append(la)

    def _stop_launch(self, la: Launch) -> None:
        """SIGTERM to `alnair run` reaches the workload's process group (it forwards it)."""
        if la.proc is not None:
            terminate(la.proc, 10)

    def launches_for(self, kind: str, rep: int, hold_file: str = "") -> list[Launch]:
        tag = {"seq": "a", "shared": "s", "oom": "m"}[kind]
        out = []
        for job in JOBS:
            alloc = job.oom_alloc_gib if kind == "oom" else 0.0
            scale = self.o.scale * (self.o.oom_scale if kind == "oom" else 1.0)
            alone = kind == "seq"
            out.append(Launch(job, f"{job.name}-{tag}{rep}", self.card_gib if alone else job.memory_gib,
                              100 if alone else job.compute_percent,
                              job.argv(sys.executable, sim=self.sim, scale=scale, alloc_gib=alloc,
                                       hold_file=hold_file),
                              self.out / "runs" / f"{job.name}-{tag}{rep}.log",
                              delay=self.o.oom_delay if alloc else 0.0))
        return out

    def round(self, kind: str, rep: int) -> dict[str, Any]:
        round_id = f"{kind}{rep}"
        first_shared = kind == "shared" and not any(k.startswith("shared") for k in self.results["windows"])
        # On a slow machine the stand-ins' few seconds of work may never overlap long enough
        # for one `alnair ps` to see all four: in the round pictured, they wait for the picture.
        release = self.tmp / f"release-{round_id}" if self.sim and first_shared else None
        launches = self.launches_for(kind, rep, hold_file=str(release or ""))
        print(f"e2e: round {round_id}: {', '.join(la.name for la in launches)}", flush=True)
        began = time.time()
        timeout = self.o.round_timeout
        seq = next((x for x in self.results["rounds"] if x["kind"] == "seq" and x["rep"] == rep), None)
        if kind != "seq" and seq and seq["ok"]:
            timeout = min(timeout, 2 * seq["makespan_s"] + 30)  # twice the sequential time: sharing failed
        if kind == "seq":
            for la in launches:
                self.run_together([la], timeout)
        else:
            self.window = Window(round_id, {la.name for la in launches}, snapshot=first_shared, t0=began,
                                 release=release)
            self.next_scrape = self.next_ps = 0.0
            try:
                self.run_together(launches, timeout)
                self.pump(1.0)  # the last samples and lifecycle events
            finally:
                if release is not None:
                    release.touch()
                w, self.window = self.window, None
            if w.snapshot and not w.scrape_saved and w.last_scrape:
                (self.out / "metrics_scrape.txt").write_text(w.last_scrape)  # never all four at once: the last
            if first_shared or kind == "oom":
                self.results["windows"][round_id] = self._window_record(w, launches)
        jobs = {la.job.name: la.result() for la in launches}
        starts = [la.started for la in launches]
        ends = [la.ended for la in launches if la.ended]
        ok = all(j["exit"] == 0 for j in jobs.values()) if kind != "oom" else None
        record = {"id": round_id, "kind": kind, "rep": rep, "started_at": began,
                  "makespan_s": (max(ends) - min(starts)) if ends else None, "ok": ok, "jobs": jobs}
        if kind == "oom":
            record["oom"] = self._oom_verdict(jobs)
        if any(j["timed_out"] for j in jobs.values()):
            self.note(f"round {round_id}: stopped after {timeout:.0f} s: "
                      f"{', '.join(j['workload'] for j in jobs.values() if j['timed_out'])} had not finished")
        exits = ", ".join(f"{n} exit {j['exit']}" for n, j in jobs.items())
        print(f"e2e: round {round_id} done in {record['makespan_s'] or 0:.1f} s ({exits})", flush=True)
        return record

    def _window_record(self, w: Window, launches: list[Launch]) -> dict[str, Any]:
        spans = {la.name: ((la.started - w.t0), ((la.ended or time.time()) - w.t0)) for la in launches}
        return {"round": w.round_id, "t0": w.t0, "spans": spans, "samples": w.samples, "ps": w.ps,
                "summary": summarise_window(w.samples, spans)}

    @staticmethod
    def _oom_verdict(jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        probe = next((j for name, j in jobs.items() if any(job.name == name and job.oom_alloc_gib for job in JOBS)),
                     None)
        others = [j for j in jobs.values() if j is not probe]
        caught = probe is not None and probe["exit"] == OOM_EXIT and bool(probe["oom_caught"])
        rest_ok = all(j["exit"] == 0 for j in others)
        return {"probe": probe["workload"] if probe else None, "caught": caught, "others_ok": rest_ok,
                "ok": caught and rest_ok}

    def profiles(self, names: list[str]) -> None:
        (self.out / "profiles").mkdir(exist_ok=True)
        for name in names:
            deadline, done = time.monotonic() + 20, None
            while time.monotonic() < deadline:
                done = self.call("profile", name, "--json", timeout=60)
                if done.returncode == 0:
                    break
                self.pump(1.0)
            if done is None or done.returncode != 0:
                self.results["profiles"][name] = {"error": (done.stderr if done else "no answer").strip()[-300:]}
                continue
            (self.out / "profiles" / f"{name}.json").write_text(done.stdout)
            docs = json.loads(done.stdout).get("workloads") or [{}]
            self.results["profiles"][name] = profile_summary(docs[0])

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
                    self.profiles([f"{job.name}-s{rep}" for job in JOBS])
            else:
                self.results["rounds"].append(self.round(kind, rep))
                if kind == "shared" and f"shared{rep}" in self.results["windows"]:
                    write_plot(self.out, self.results["windows"][f"shared{rep}"], self.results)
            self.save()
        self.results["status"] = "complete"
        failed = [r["id"] for r in self.results["rounds"]
                  if r["ok"] is False or (r["kind"] == "oom" and not r["oom"]["ok"])]
        if failed:
            self.note(f"rounds with a failed workload or verdict: {', '.join(failed)} (exit status 1)")
        return 1 if failed else 0

    def environment_start(self) -> dict[str, Any]:
        env: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                               "python": sys.version.split()[0], "host_cpus": os.cpu_count()}
        try:
            head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                                  timeout=10)
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                   text=True, cwd=ROOT, timeout=10)
            env["commit"] = (head.stdout.strip()[:12] + (" (+ local changes)" if dirty.stdout.strip() else "")
                             if head.returncode == 0 else "unknown (no git here)")
        except (OSError, subprocess.SubprocessError):
            env["commit"] = "unknown (no git here)"
        if self.o.commit:
            env["commit"] = self.o.commit
        if self.sim:
            env.update(gpu=f"SIMULATED ({SIM_GPUS}, no GPU, CPU stand-ins)", driver="-", cuda="-",
                       torch="not used (stand-ins)")
            return env
        query = (self._smi("--query-gpu=name,driver_version,memory.total", "--format=csv,noheader")
                 .splitlines() or ["?, ?, ?"])[0].split(", ")
        cuda = re.search(r"CUDA Version:\s*([\d.]+)", self._smi())
        env.update(gpu=f"{query[0]} ({query[-1]})", driver=query[1] if len(query) > 2 else "?",
                   cuda=cuda.group(1) if cuda else "?")
        return env

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
        for la in self.launches:
            if la.proc is not None and la.proc.poll() is None:
                la.proc.terminate()
        for la in self.launches:
            if la.proc is not None:
                try:
                    la.proc.wait(10)
                except subprocess.TimeoutExpired:
                    signal_group(la.proc.pid, signal.SIGKILL)
                    la.proc.wait(5)
        reapers = []
        for pid_file in (self.data_dir / "workloads").glob("*/pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                if alive(pid) and str(self.data_dir) in Path(f"/proc/{pid}/cmdline").read_text():
                    signal_group(pid, signal.SIGTERM)
                    reapers.append(pid)
        for pid in wait_gone(reapers, 5):
            signal_group(pid, signal.SIGKILL)
        if self.ps_proc is not None and self.ps_proc[0].poll() is None:
            self.ps_proc[0].kill()
            self.ps_proc[0].wait(5)
        if self.events is not None:
            self._ingest_events()
            terminate(self.events, 5)
        if self.up is not None and self.up.poll() is None:
            self.up.terminate()
            try:
                self.up.wait(40)
            except subprocess.TimeoutExpired:
                self.note("alnair up did not stop within 40 s of SIGTERM: killed")
                signal_group(self.up.pid, signal.SIGKILL)
                self.up.wait(5)
        left = self.ours()
        for pid in left:
            signal_group(pid, signal.SIGTERM)
        for pid in wait_gone(left, 5):
            signal_group(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pipe in sorted(self.data_dir.glob("mps/*/pipe")):  # daemons outlive the platform by design
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, timeout=30,
                               env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)}, capture_output=True)
        self.results["teardown"] = {"left_behind_then_killed": left, "clean": not wait_gone(self.ours(), 3)}
        self._keep_logs()

    def ours(self) -> list[int]:
        """Processes of this run still alive: they name its data dir (services, workloads, CLI)
        or its NATS server; never this script or the shells that started it."""
        mine = {*processes_mentioning(f"{self.data_dir}/"), *processes_mentioning(f"{self.data_dir}\0"),
                *processes_mentioning(f"alnair-{self.port}\0")}
        return sorted(mine - ancestors())

    def _keep_logs(self) -> None:
        logs = self.out / "logs"
        logs.mkdir(exist_ok=True)
        for path in [self.tmp / "up.log", *sorted((self.data_dir / "logs").glob("*.log"))]:
            with contextlib.suppress(OSError):
                (logs / path.name).write_text(path.read_text(errors="replace")[-200_000:])
        if not self.o.keep_data:
            shutil.rmtree(self.tmp, ignore_errors=True)  # a --data-dir given is left where it is


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
