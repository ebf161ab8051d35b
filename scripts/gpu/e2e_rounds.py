"""The rounds of the end-to-end run (``e2e_share.py``): its four jobs through ``alnair run``.

A round is one of three kinds: ``seq`` (each job alone with the whole card, one after the
other), ``shared`` (all four at once within their limits, watched by the observers) and
``oom`` (the same four, one asking for more memory than its limit, a while after the others
so that it asks while they train; its verdict: that one caught the refusal, the others
finished). Each round's record goes into ``results["rounds"]``; after the first shared
round, ``alnair profile`` of each of its workloads into ``results["profiles"]``. Standard
library only.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_observers import Observers, Window
from e2e_platform import Platform
from e2e_procs import signal_group, terminate
from e2e_report import profile_summary, summarise_window
from e2e_workloads import JOBS, OOM_EXIT, Job


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


def stop_launches(launches: list[Launch]) -> None:
    """SIGTERM to every `alnair run` still going (it forwards it to the workload's group),
    then SIGKILL by group to any not gone within 10 s."""
    for la in launches:
        if la.proc is not None and la.proc.poll() is None:
            la.proc.terminate()
    for la in launches:
        if la.proc is not None:
            try:
                la.proc.wait(10)
            except subprocess.TimeoutExpired:
                signal_group(la.proc.pid, signal.SIGKILL)
                la.proc.wait(5)


def oom_verdict(jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The memory round passes when the job asking too much exits ``OOM_EXIT`` having caught
    the refusal, and every other job exits 0."""
    probe = next((j for name, j in jobs.items() if any(job.name == name and job.oom_alloc_gib for job in JOBS)),
                 None)
    others = [j for j in jobs.values() if j is not probe]
    caught = probe is not None and probe["exit"] == OOM_EXIT and bool(probe["oom_caught"])
    rest_ok = all(j["exit"] == 0 for j in others)
    return {"probe": probe["workload"] if probe else None, "caught": caught, "others_ok": rest_ok,
            "ok": caught and rest_ok}


class Rounds:
    """Runs rounds on ``platform``; every launch is also appended to ``launches`` (the list
    the teardown stops). ``budget`` says how many seconds are left for workloads (what
    --deadline leaves once the teardown is counted)."""

    def __init__(self, opts: argparse.Namespace, platform: Platform, observers: Observers,
                 results: dict[str, Any], launches: list[Launch], note: Callable[[str], None],
                 budget: Callable[[], float]) -> None:
        self.o = opts
        self.out: Path = opts.out
        self.sim: bool = opts.sim
        self.platform = platform
        self.observers = observers
        self.results = results
        self.launches = launches
        self.note = note
        self.budget = budget

    def launches_for(self, kind: str, rep: int, hold_file: str = "") -> list[Launch]:
        tag = {"seq": "a", "shared": "s", "oom": "m"}[kind]
        out = []
        for job in JOBS:
            alloc = job.oom_alloc_gib if kind == "oom" else 0.0
            scale = self.o.scale * (self.o.oom_scale if kind == "oom" else 1.0)
            alone = kind == "seq"
            out.append(Launch(job, f"{job.name}-{tag}{rep}", self.platform.card_gib if alone else job.memory_gib,
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
        release = self.platform.tmp / f"release-{round_id}" if self.sim and first_shared else None
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
            w = Window(round_id, {la.name for la in launches}, snapshot=first_shared, t0=began, release=release)
            self.observers.follow(w)
            try:
                self.run_together(launches, timeout)
                self.observers.pump(1.0)  # the last samples and lifecycle events
            finally:
                if release is not None:
                    release.touch()
                self.observers.follow(None)
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
            record["oom"] = oom_verdict(jobs)
        if any(j["timed_out"] for j in jobs.values()):
            self.note(f"round {round_id}: stopped after {timeout:.0f} s: "
                      f"{', '.join(j['workload'] for j in jobs.values() if j['timed_out'])} had not finished")
        exits = ", ".join(f"{n} exit {j['exit']}" for n, j in jobs.items())
        print(f"e2e: round {round_id} done in {record['makespan_s'] or 0:.1f} s ({exits})", flush=True)
        return record

    def run_together(self, launches: list[Launch], timeout: float) -> None:
        """Start them at once and wait for all; past ``timeout`` (or what --deadline leaves)
        the ones still going are stopped and marked timed out."""
        left = self.budget()
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
            self.observers.tick()
            time.sleep(0.05)

    def _launch(self, la: Launch) -> None:
        la.log.parent.mkdir(parents=True, exist_ok=True)
        argv = self.platform.alnair("run", "--name", la.name, "--gpu-memory", str(la.memory_gib),
                                    "--gpu-compute", str(la.compute_percent), "--", *la.argv)
        la.started = time.time()
        la.proc = self.platform.spawn(argv, la.log)
        self.launches.append(la)

    def _stop_launch(self, la: Launch) -> None:
        """SIGTERM to `alnair run` reaches the workload's process group (it forwards it)."""
        if la.proc is not None:
            terminate(la.proc, 10)

    def _window_record(self, w: Window, launches: list[Launch]) -> dict[str, Any]:
        spans = {la.name: ((la.started - w.t0), ((la.ended or time.time()) - w.t0)) for la in launches}
        return {"round": w.round_id, "t0": w.t0, "spans": spans, "samples": w.samples, "ps": w.ps,
                "summary": summarise_window(w.samples, spans)}

    def profiles(self, names: list[str]) -> None:
        """`alnair profile --json` of each workload (retried for 20 s: the profiler may still
        be writing it), saved under ``profiles/`` and summarised into the results."""
        (self.out / "profiles").mkdir(exist_ok=True)
        for name in names:
            deadline, done = time.monotonic() + 20, None
            while time.monotonic() < deadline:
                done = self.platform.call("profile", name, "--json", timeout=60)
                if done.returncode == 0:
                    break
                self.observers.pump(1.0)
            if done is None or done.returncode != 0:
                self.results["profiles"][name] = {"error": (done.stderr if done else "no answer").strip()[-300:]}
                continue
            (self.out / "profiles" / f"{name}.json").write_text(done.stdout)
            docs = json.loads(done.stdout).get("workloads") or [{}]
            self.results["profiles"][name] = profile_summary(docs[0])
