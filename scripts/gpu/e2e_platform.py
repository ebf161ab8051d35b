"""The local platform of the end-to-end run (``e2e_share.py``): checked, started, stopped.

Everything Alnair is reached through the ``alnair`` CLI, run with this interpreter against a
private ``--data-dir``, NATS port and exporter port, so that a run shares nothing with another
platform on the machine and its teardown can find every process it started by those names.
``alnair up`` counts as started once ``alnair status --json`` says healthy. Standard library
only.
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
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e_procs import alive, ancestors, die_with_parent, free_port, processes_mentioning, signal_group, wait_gone
from e2e_report import SAMPLE_PERIOD_S

ROOT = Path(__file__).resolve().parents[2]
SIM_GPUS = "sim:1x80"

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


class SetupError(Exception):
    """The run cannot start (missing interceptor, modules or GPU); the message says what to do."""


class Platform:
    """One ``alnair up`` of this run, its CLI and its processes."""

    def __init__(self, opts: argparse.Namespace, tmp: Path) -> None:
        self.o = opts
        self.sim: bool = opts.sim
        self.tmp = tmp
        self.data_dir: Path = opts.data_dir.resolve() if opts.data_dir else tmp / "alnair"
        self.port, self.metrics_port = free_port(), free_port()
        self.cli_env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
        self.cli_env.update(COLUMNS="200", PYTHONUNBUFFERED="1", NO_COLOR="1")
        self.up: subprocess.Popen[bytes] | None = None
        self.card_gib = 80

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

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    # -- before the start ----------------------------------------------------------------------

    def check_modules(self) -> dict[str, str]:
        """Raise SetupError unless a --data-dir given is empty and this interpreter imports
        the platform (and, on a GPU, pynvml and torch); the versions found (torch) otherwise."""
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
        versions: dict[str, str] = found.get("versions", {})
        return versions

    def check_gpu(self) -> None:
        """Raise SetupError without the interceptor (built once if missing) or a GPU; learns
        the card's memory (``card_gib``), which the sequential rounds ask for."""
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

    def environment(self, commit: str | None) -> dict[str, Any]:
        """Date, commit, Python and the card (driver, CUDA) for the report's first lines."""
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
        if commit:
            env["commit"] = commit
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

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``alnair up``, then ``alnair status --json`` once a second until healthy (within
        ``--up-timeout``): that status report, and this platform's record for the report."""
        argv = self.alnair("up", "--port", str(self.port))
        argv += ["--gpus", SIM_GPUS] if self.sim else ["--interceptor", str(self.o.interceptor.resolve())]
        argv += ["--mps"] if self.o.mps else []
        env = {**self.cli_env, "ALNAIR_METRICS_PORT": str(self.metrics_port),
               "ALNAIR_SAMPLE_PERIOD_SECONDS": str(SAMPLE_PERIOD_S)}
        print(f"e2e: alnair up ({'simulated ' + SIM_GPUS if self.sim else 'interceptor ' + str(self.o.interceptor)}"
              f", data {self.data_dir}, NATS port {self.port}, metrics port {self.metrics_port})", flush=True)
        started = time.monotonic()
        self.up = self.spawn(argv, self.tmp / "up.log", env)
        deadline = started + self.o.up_timeout
        while True:
            if self.up.poll() is not None:
                raise SetupError(f"alnair up exited {self.up.returncode}: {_tail(self.tmp / 'up.log')}")
            done = self.call("status", "--json", timeout=30)
            if done.returncode == 0:
                report = json.loads(done.stdout)
                break
            if time.monotonic() > deadline:
                raise SetupError(f"alnair status not healthy after {self.o.up_timeout:g} s: {done.stdout[-800:]}")
            time.sleep(1.0)
        record = {"healthy_after_s": round(time.monotonic() - started, 2),
                  "services": [s["name"] for s in report.get("services", [])],
                  "metrics_url": self.metrics_url, "gpus": SIM_GPUS if self.sim else "NVML",
                  "interceptor": None if self.sim else str(self.o.interceptor)}
        return report, record

    # -- stop ----------------------------------------------------------------------------------

    def stop_reapers(self) -> None:
        """The reapers of workloads still running (`alnair run` gone), by their recorded pid."""
        reapers = []
        for pid_file in (self.data_dir / "workloads").glob("*/pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                if alive(pid) and str(self.data_dir) in Path(f"/proc/{pid}/cmdline").read_text():
                    signal_group(pid, signal.SIGTERM)
                    reapers.append(pid)
        for pid in wait_gone(reapers, 5):
            signal_group(pid, signal.SIGKILL)

    def stop(self, note: Callable[[str], None]) -> list[int]:
        """`alnair up` (SIGTERM: it stops its services and NATS), then whatever of this run
        survives, by group, then any MPS daemon; the pids that had to be signalled."""
        if self.up is not None and self.up.poll() is None:
            self.up.terminate()
            try:
                self.up.wait(40)
            except subprocess.TimeoutExpired:
                note("alnair up did not stop within 40 s of SIGTERM: killed")
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
        return left

    def ours(self) -> list[int]:
        """Processes of this run still alive: they name its data dir (services, workloads, CLI)
        or its NATS server; never this script or the shells that started it."""
        mine = {*processes_mentioning(f"{self.data_dir}/"), *processes_mentioning(f"{self.data_dir}\0"),
                *processes_mentioning(f"alnair-{self.port}\0")}
        return sorted(mine - ancestors())

    def keep_logs(self, out: Path) -> None:
        """The platform's logs (last 200 kB each) into ``out/logs``; the temp dir removed
        unless --keep-data (a --data-dir given is left where it is)."""
        logs = out / "logs"
        logs.mkdir(exist_ok=True)
        for path in [self.tmp / "up.log", *sorted((self.data_dir / "logs").glob("*.log"))]:
            with contextlib.suppress(OSError):
                (logs / path.name).write_text(path.read_text(errors="replace")[-200_000:])
        if not self.o.keep_data:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""
