"""What the end-to-end run (``e2e_share.py``) records beside its workloads.

Three observers, driven by ``tick`` from the one thread that also starts and waits for the
workloads (no threads, so a signal stops everything at once): the ``alnair events`` tail,
read on every tick into event counts and per-workload lifecycle; and, while a round's
workloads share the GPU (a ``Window``), the exporter's ``/metrics`` every
``SAMPLE_PERIOD_S`` and an ``alnair ps`` every ``PS_PERIOD_S``, run in the background so a
slow table never delays a scrape. Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e_platform import ROOT, Platform
from e2e_procs import terminate
from e2e_report import (
    PS_PERIOD_S,
    SAMPLE_PERIOD_S,
    lifecycle_entry,
    parse_exposition,
    parse_ps_table,
    per_workload,
    redact,
)


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


class Observers:
    """The events tail always; /metrics and `alnair ps` while a window is followed. Writes
    ``events.log``, ``metrics_scrape.txt`` and ``ps_shared.*`` into ``out``, and its readings
    into ``results`` (``event_counts``, ``lifecycle``, ``ps_table``)."""

    def __init__(self, platform: Platform, out: Path, results: dict[str, Any],
                 note: Callable[[str], None]) -> None:
        self.platform = platform
        self.out = out
        self.results = results
        self.note = note
        self.sim = platform.sim
        self.tmp = platform.tmp
        self.events: subprocess.Popen[bytes] | None = None
        self.events_raw = self.tmp / "events.raw"
        self.events_offset = 0
        self.window: Window | None = None
        self.next_scrape = self.next_ps = 0.0
        self.ps_proc: tuple[subprocess.Popen[bytes], Path] | None = None

    def start_events(self) -> None:
        """The `alnair events` tail, waited for (at most 60 s) until it shows something."""
        self.events = self.platform.spawn(self.platform.alnair("events", "--subject", "alnair.>"), self.events_raw)
        # Live once it prints: the exporter publishes a sample every period, so that is soon.
        deadline = time.monotonic() + 60
        while not self.results["event_counts"] and time.monotonic() < deadline and self.events.poll() is None:
            self.pump(0.2)
        if not self.results["event_counts"]:
            self.note(f"`alnair events` showed nothing within 60 s (exit {self.events.poll()}): lifecycle may be "
                      "incomplete")

    def follow(self, window: Window | None) -> None:
        """Scrape and sample `alnair ps` for ``window`` from the next tick on (None: stop)."""
        self.window = window
        self.next_scrape = self.next_ps = 0.0

    def stop(self) -> None:
        """A pending `alnair ps` killed; the events tail read a last time and stopped."""
        if self.ps_proc is not None and self.ps_proc[0].poll() is None:
            self.ps_proc[0].kill()
            self.ps_proc[0].wait(5)
        if self.events is not None:
            self._ingest_events()
            terminate(self.events, 5)

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.tick()
            time.sleep(0.1)

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
                self.ps_proc = (subprocess.Popen(self.platform.alnair("ps"), stdout=f, stderr=subprocess.DEVNULL,
                                                 env=self.platform.cli_env, cwd=ROOT), path)

    def _scrape(self, w: Window, now: float) -> None:
        try:
            with urllib.request.urlopen(self.platform.metrics_url, timeout=1.0) as r:
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
