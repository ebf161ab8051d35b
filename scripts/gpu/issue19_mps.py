"""Issue 19 §2 on the H200: compute shares as MPS SM partitions, set by the interceptor (~3 min).

    make -s -C native/cuda_intercept BUILD_DIR=/tmp/alnair-b lib
    python3 scripts/gpu/issue19_mps.py --lib /tmp/alnair-b/libalnair_cuda.so --out "$OUT"

As root: starts an MPS control daemon for one GPU (``nvidia-cuda-mps-control -d``, its pipe
and log directories in a temporary directory), then runs the bf16 4096² (``--size``) matmul loop of
``issue19_h200.py`` (10 matmuls a step, synchronised, steps counted over a fixed window) as
child processes under the built interceptor, each with a limits file in MPS mode
(``mps_pipe_directory``, rendered by ``alnair_common.cuda_handoff``): the interceptor turns
``compute_percent`` into the client's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and the memory
limit into ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``; its time-slicing throttle stays off.

Before the daemon starts, the same tenants time-sliced (``ts_*``: no MPS, the interceptor's throttle with the
limit from ``ALNAIR_VGPU_COMPUTE_PERCENT``): alone at 30 %, the unlimited pair, pairs 30+70
and 10+90, shares against the loop alone without MPS.

Phases, each tenant started together with its phase's others, the measurement windows the
same wall-clock interval (``--settle`` s, then ``--measure`` s): the loop alone without MPS
(the interceptor, no limits: context), alone in MPS mode without a compute limit (the
reference), alone at 10/30/50/70/90 %, pairs 30+70 and 10+90, four at 10/20/30/40. Each
tenant's share = its rate / the reference rate of the same run. Also recorded per tenant:
the MPS variables the process ended up with, the region's throttled time and token rate
(both must be 0: no throttle on top of the partition), the SM clock and power mid-window;
and the daemon's server and client lists during the quad phase, the tail of its log.

Output: ``OUT/issue19_mps.json`` and ``OUT/issue19_mps.md`` (a table). The daemon is stopped
(``echo quit | nvidia-cuda-mps-control``) and the temporary directories removed at the end,
also on error.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

from issue19_h200 import gpu_clock_later  # the same clock/power probe as the time-slicing run

REPO = Path(__file__).resolve().parents[2]
# alnair_common's package __init__ pulls in the bus (nats) and service code, which the GPU
# machine need not have: load only the hand-off's stdlib-only modules, as a bare package.
_pkg = types.ModuleType("alnair_common")
_pkg.__path__ = [str(REPO / "libs/common/src/alnair_common")]
sys.modules.setdefault("alnair_common", _pkg)
from alnair_common.cuda_handoff import CudaShare, write_limits  # noqa: E402
from alnair_common.cuda_region import read_region  # noqa: E402

MPS_VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                 "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
MEMORY_GIB = 16  # far above the loop's ~100 MiB: exercises the pinned limit, never binds
CONTROL = "nvidia-cuda-mps-control"
# (phase name, MPS mode, the tenants' compute limits; 0 = none)
PHASES = (
    ("native_alone", False, (0,)),
    # the same tenants time-sliced (no MPS; the interceptor's throttle, limits from the
    # environment), against native_alone: the pair yardstick of section 1; before the
    # daemon starts, so that no MPS server holds the card
    ("ts_single_30", False, (30,)),
    ("ts_pair_none", False, (0, 0)),
    ("ts_pair_30_70", False, (30, 70)),
    ("ts_pair_10_90", False, (10, 90)),
    ("mps_alone", True, (0,)),
    ("mps_pair_none", True, (0, 0)),  # what a pair gets together: the higher limit's yardstick
    *((f"single_{p}", True, (p,)) for p in (10, 30, 50, 70, 90)),
    ("pair_30_70", True, (30, 70)),
    ("pair_10_90", True, (10, 90)),
    ("quad_10_20_30_40", True, (10, 20, 30, 40)),
)


# ---- the tenant (its own process, under the interceptor) --------------------------------


def tenant_worker(size: int) -> None:
    """Warms up, says ready, waits for the phase's start time, runs the loop until
    start + settle + measure and reports its rate over the last ``measure`` seconds."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)

    def step() -> int:
        for _ in range(10):
            a @ b
        return 10

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    mps_env = {n: (v.decode() if (v := libc.getenv(n.encode())) else None) for n in MPS_VARIABLES}
    print(json.dumps({"ready": True, "pid": os.getpid(), "mps_env": mps_env}), flush=True)
    plan = json.loads(sys.stdin.readline())
    start, settle, measure = plan["start"], plan["settle"], plan["measure"]
    probe = gpu_clock_later(max(0.0, start + settle + measure / 2 - time.time()))
    time.sleep(max(0.0, start - time.time()))
    while time.time() < start + settle:
        step()
        torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    end = start + settle + measure
    while time.time() < end:
        n += step()
        torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t0)
    clock = probe.communicate()[0].strip()
    region = {}
    path = Path(os.environ.get("ALNAIR_WORKSPACE", "/nonexistent"), "cuda.region")
    try:
        slots = read_region(path).active() if path.exists() else ()
    except Exception as e:  # noqa: BLE001 (a busy or odd region: reported, not fatal)
        slots, region = (), {"error": f"{type(e).__name__}: {e}"}
    for slot in slots:
        if slot.pid == os.getpid() and 0 in slot.active_devices():
            d = slot.active_devices()[0]
            region = {"throttled_ns": d.throttled_ns, "token_rate_per_s": d.token_rate_per_s,
                      "sm_util_percent": d.sm_util_percent, "sm_util_source": d.sm_util_source,
                      "kernel_launches": d.kernel_launches}
    print(json.dumps({"rate": rate, "clock_power": clock, "mps_env": mps_env, "region": region}), flush=True)


# ---- orchestration -------------------------------------------------------------------------


def control(env: dict[str, str], command: str, timeout: float = 10) -> str:
    """The control daemon's answer to `command` (an error text when there is none)."""
    try:
        done = subprocess.run([CONTROL], input=command + "\n", env=env, capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({command}: {e})"
    return (done.stdout + done.stderr).strip()


def wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.1)
    return path.exists()


def gpu_uuid(index: str) -> str:
    out = subprocess.run(["nvidia-smi", "-i", index, "--query-gpu=uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out.splitlines()[0].strip()


class Run:
    """One run: the daemon's directories, the tenants' workspaces, the results so far."""

    def __init__(self, args: argparse.Namespace, root: Path, uuid: str) -> None:
        self.args, self.root, self.uuid = args, root, uuid
        self.pipe, self.logs = root / "pipe", root / "log"
        self.daemon_env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid,
                           "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe), "CUDA_MPS_LOG_DIRECTORY": str(self.logs)}
        self.daemon_started = False

    def start_daemon(self) -> None:
        self.pipe.mkdir(mode=0o755)
        self.logs.mkdir(mode=0o755)
        self.daemon_started = True  # from here on, stopping it is part of the cleanup
        said = self.root / "control-start.txt"
        with said.open("w") as f:  # a file, not a pipe: the daemon may keep what it inherits
            rc = subprocess.run([CONTROL, "-d"], env=self.daemon_env, stdin=subprocess.DEVNULL, stdout=f,
                                stderr=subprocess.STDOUT, timeout=30).returncode
        if rc != 0:
            raise RuntimeError(f"{CONTROL} -d: exit {rc}: {said.read_text(errors='replace').strip()}")
        if not wait_for(self.pipe / "control", 15):
            raise RuntimeError(f"no control socket in {self.pipe} 15 s after {CONTROL} -d")

    def stop_daemon(self) -> str:
        if not self.daemon_started:
            return ""
        said = control(self.daemon_env, "quit")
        pid_file = self.pipe / "nvidia-cuda-mps-control.pid"
        deadline = time.monotonic() + 15
        while pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.daemon_started = False
        return said

    def tenant_env(self, name: str, percent: int, mps: bool) -> dict[str, str]:
        ws = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))
        if mps:
            share = CudaShare(f"issue19/{name}", self.uuid, memory_gib=MEMORY_GIB, compute_percent=percent,
                              mps_pipe_directory=str(self.pipe))
            write_limits(ws, share)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ALNAIR_", "CUDA_MPS_")) and k != "LD_PRELOAD"}
        # No CUDA_MPS_* from here: the interceptor sets them from the limits file.
        env.update(LD_PRELOAD=self.args.lib, ALNAIR_WORKSPACE=str(ws), CUDA_VISIBLE_DEVICES=self.uuid)
        if not mps and percent:
            env["ALNAIR_VGPU_COMPUTE_PERCENT"] = str(percent)  # time-slicing: the throttle
        return env

    def phase(self, name: str, mps: bool, percents: tuple[int, ...], probe: bool) -> dict:
        procs: list[Tenant] = []
        try:
            for i, p in enumerate(percents):
                procs.append(Tenant(self.tenant_env(f"{name}-{i}", p, mps), self.args.size))
            ready = [p.line(90) for p in procs]
            if not all(r.get("ready") for r in ready):
                return {"error": "a tenant did not start", "tenants": ready,
                        "stderr": [p.stderr_tail() for p in procs]}
            start = time.time() + 0.5
            plan = json.dumps({"start": start, "settle": self.args.settle, "measure": self.args.measure})
            for p in procs:
                p.send(plan)
            servers = None
            if probe and mps:
                time.sleep(self.args.settle)
                servers = {"server_list": control(self.daemon_env, "get_server_list")}
                servers["client_lists"] = {s: control(self.daemon_env, f"get_client_list {s}")
                                           for s in servers["server_list"].split() if s.isdigit()}
            budget = start + self.args.settle + self.args.measure + 60 - time.time()
            tenants = [p.line(budget) for p in procs]
            for t, limit, r, p in zip(tenants, percents, ready, procs, strict=True):
                t["limit"], t["pid"] = limit, r.get("pid")
                if "error" in t:
                    t["stderr"] = p.stderr_tail()
            return {"mps": mps, "tenants": tenants, **({"mps_daemon": servers} if servers else {})}
        finally:
            for p in procs:
                p.stop()


class Tenant:
    """One tenant process: its JSON lines through a queue (a read with a deadline), its
    stderr into a file of its workspace (a full pipe would stall it)."""

    def __init__(self, env: dict[str, str], size: int) -> None:
        self.err_path = Path(env["ALNAIR_WORKSPACE"], "stderr.txt")
        with self.err_path.open("w") as err:
            self.proc = subprocess.Popen([sys.executable, __file__, "--tenant", str(size)], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def line(self, seconds: float) -> dict:
        """The tenant's next JSON line, or an error when it exits or takes over `seconds`."""
        deadline = time.monotonic() + max(seconds, 1.0)
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                return {"error": f"exit {self.proc.wait(timeout=30)}"}
            if line.startswith("{"):
                return json.loads(line)
        return {"error": f"no answer in {seconds:.0f} s"}

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stderr_tail(self) -> str:
        return self.err_path.read_text(errors="replace")[-1500:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def alone_rate(results: dict, phase: str) -> float | None:
    tenants = results["phases"].get(phase, {}).get("tenants") or [{}]
    return tenants[0].get("rate")


def shares(results: dict) -> None:
    """Adds each tenant's share of its mode's reference: the loop alone in MPS mode with no
    limit for MPS phases, alone without MPS for the time-sliced ones."""
    ref = alone_rate(results, "mps_alone")
    native = alone_rate(results, "native_alone")
    results["reference_rate"], results["native_rate"] = ref, native
    for phase in results["phases"].values():
        base = ref if phase.get("mps") else native
        for t in phase.get("tenants", []):
            if base and "rate" in t:
                t["share_percent"] = round(100 * t["rate"] / base, 1)


def markdown(results: dict) -> str:
    rows = ["| phase | limit % | matmul/s | share of alone % | phase total % | throttled ns | "
            "MPS active threads | pinned limit | SM clock, power |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, phase in results["phases"].items():
        tenants = phase.get("tenants", [])
        if "error" in phase:
            rows.append(f"| {name} | | | | | | | | error: {phase['error']} |")
            continue
        total = sum(t.get("share_percent", 0) for t in tenants)
        for t in tenants:
            env = t.get("mps_env") or {}
            rows.append(
                f"| {name} | {t.get('limit') or 'none'} | {t.get('rate', float('nan')):.1f} | "
                f"{t.get('share_percent', '')} | {total:.1f} | {t.get('region', {}).get('throttled_ns', '')} | "
                f"{env.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE') or '-'} | "
                f"{env.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT') or '-'} | {t.get('clock_power') or ''} |")
    head = (f"MPS mode on {results.get('gpu')} ({results.get('driver')}), bf16 {results.get('size')}² "
            f"matmul; reference (alone, MPS, no "
            f"limit): {results.get('reference_rate')} matmul/s; alone without MPS: "
            f"{results.get('native_rate')} matmul/s; windows: {results['settle_s']} s settle, "
            f"{results['measure_s']} s measured.\n\n")
    return head + "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="the built libalnair_cuda.so")
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu", default="0", help="nvidia-smi index of the GPU to share")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--measure", type=float, default=8.0)
    ap.add_argument("--phases", default="", help="comma-separated phase names (default: all)")
    ap.add_argument("--size", type=int, default=4096,
                    help="the matmul's n (n x n bf16): the grid's tiles against the SMs of a partition")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("issue19_mps.py runs as root: it starts and stops the MPS control daemon")
    if shutil.which(CONTROL) is None:
        sys.exit(f"{CONTROL} not found (the NVIDIA driver's MPS tools)")
    a.lib = str(Path(a.lib).resolve())
    if not Path(a.lib).is_file():
        sys.exit(f"no interceptor at {a.lib}: make -s -C native/cuda_intercept BUILD_DIR=/tmp/alnair-b lib")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    uuid = gpu_uuid(a.gpu)
    smi = subprocess.run(["nvidia-smi", "-i", a.gpu, "--query-gpu=name,driver_version,compute_mode",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    results: dict = {"gpu": uuid, "driver": smi, "size": a.size, "settle_s": a.settle, "measure_s": a.measure,
                     "phases": {}}
    root = Path(tempfile.mkdtemp(prefix="alnair-mps-"))
    root.chmod(0o755)
    run = Run(a, root, uuid)

    def save() -> None:
        shares(results)
        (out / "issue19_mps.json").write_text(json.dumps(results, indent=1))
        (out / "issue19_mps.md").write_text(markdown(results))

    try:
        wanted = set(filter(None, a.phases.split(",")))
        for name, mps, percents in PHASES:
            if wanted and name not in wanted:
                continue
            if mps and not run.daemon_started:
                run.start_daemon()
            r = run.phase(name, mps, percents, probe=name.startswith("quad"))
            results["phases"][name] = r
            print(name, json.dumps(r), flush=True)
            save()
    except Exception as e:  # noqa: BLE001 (recorded, then the daemon is stopped)
        results["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        log = run.logs / "control.log"
        results["daemon_log_tail"] = log.read_text(errors="replace")[-3000:] if log.exists() else None
        results["daemon_quit"] = run.stop_daemon()
        save()
        shutil.rmtree(root, ignore_errors=True)
    print((out / "issue19_mps.md").read_text())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--tenant":
        tenant_worker(int(sys.argv[2]))
    else:
        main()
