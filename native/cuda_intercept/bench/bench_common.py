"""Shared helpers of the interceptor's GPU benchmarks (stdlib only; torch/pynvml optional).

Every benchmark runs its GPU work in child processes, hooked (LD_PRELOAD=libalnair_cuda.so,
a private ALNAIR_WORKSPACE) or native, so that one run compares both on the same machine.
Results are JSON (raw) plus a markdown section, both written under the output directory.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
NATIVE = HERE.parent
REPO = NATIVE.parents[1]
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")


def library() -> Path:
    """The library under test: $ALNAIR_CUDA_LIB or the release build."""
    lib = Path(os.environ.get("ALNAIR_CUDA_LIB", NATIVE / "build" / "libalnair_cuda.so"))
    if not lib.exists():
        raise SystemExit(f"{lib} missing: run `make -C {NATIVE}` first")
    return lib


def child_env(hooked: bool, workspace: Path | None = None, **limits: str) -> dict[str, str]:
    """Environment of a workload process: hooked with its own workspace, or native."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env.pop("LD_PRELOAD", None)
    if hooked:
        env["LD_PRELOAD"] = str(library())
        if workspace is None:
            workspace = Path(tempfile.mkdtemp(prefix="alnair-ws-"))
        workspace.mkdir(parents=True, exist_ok=True)
        env["ALNAIR_WORKSPACE"] = str(workspace)
        env.update(limits)
    return env


def run_json(cmd: list[str], env: dict[str, str], timeout: float = 900) -> dict:
    """Runs a worker that prints one JSON object as its last stdout line."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def region_module() -> types.ModuleType:
    """alnair_common.cuda_region without importing alnair_common's package (bus deps)."""
    src = REPO / "libs" / "common" / "src" / "alnair_common"
    if "alnair_common" not in sys.modules:
        pkg = types.ModuleType("alnair_common")
        pkg.__path__ = [str(src)]  # submodules load; the package __init__ does not run
        sys.modules["alnair_common"] = pkg
    import alnair_common.cuda_region as cuda_region  # noqa: PLC0415

    return cuda_region


class UtilSampler:
    """Samples SM utilisation every `period` s: per process via pynvml when available,
    else whole-device through nvidia-smi. Call start(), stop(), then per_pid()/device()."""

    def __init__(self, period: float = 0.1, device: int = 0) -> None:
        self.period, self.device = period, device
        self.samples: list[tuple[float, int, int]] = []  # (t, pid or -1, util)
        self.source = "none"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._nvml = None
        try:
            import pynvml  # noqa: PLC0415

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device)
            self.source = "pynvml per-process smUtil"
        except Exception:  # noqa: BLE001 - optional dependency
            if shutil.which("nvidia-smi"):
                self.source = "nvidia-smi utilization.gpu (device level)"

    def _loop(self) -> None:
        last = 0
        while not self._stop.is_set():
            now = time.time()
            try:
                if self._nvml is not None:
                    for s in self._nvml.nvmlDeviceGetProcessUtilization(self._handle, last):
                        last = max(last, s.timeStamp)
                        self.samples.append((s.timeStamp / 1e6, s.pid, s.smUtil))
                    u = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
                    self.samples.append((now, -1, u))
                elif self.source.startswith("nvidia-smi"):
                    out = subprocess.run(
                        [
                            "nvidia-smi",
                            "-i",
                            str(self.device),
                            "--query-gpu=utilization.gpu",
                            "--format=csv,noheader,nounits",
                        ],
                        capture_output=True,
                        text=True,
                    )
                    self.samples.append((now, -1, int(out.stdout.strip() or 0)))
            except Exception:  # noqa: BLE001 - NVML not found / no samples yet
                pass
            self._stop.wait(self.period)

    def start(self) -> UtilSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def mean(self, pid: int | None, t0: float, t1: float) -> float | None:
        """Mean utilisation of `pid` (None = device) over [t0, t1] wall-clock seconds."""
        want = -1 if pid is None else pid
        vals = [u for t, p, u in self.samples if p == want and t0 <= t <= t1]
        return statistics.fmean(vals) if vals else None


def versions() -> dict[str, str]:
    """Driver, CUDA and torch versions (whatever is available)."""
    info: dict[str, str] = {"python": sys.version.split()[0]}
    if shutil.which("nvidia-smi"):
        q = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        info["gpu"] = q.stdout.strip()
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
        for line in head.splitlines():
            if "CUDA Version" in line:
                info["driver_cuda"] = line.split("CUDA Version:")[1].split("|")[0].strip()
    try:
        import torch  # noqa: PLC0415

        info["torch"] = torch.__version__
        info["torch_cuda"] = str(torch.version.cuda)
    except Exception as exc:  # noqa: BLE001
        info["torch"] = f"unavailable ({exc})"
    return info


def out_dir(doc: str | None) -> Path:
    """The one argument every benchmark takes, its output directory; anything else (``--help``
    included) prints the script's docstring and exits 2, instead of becoming a directory."""
    args = sys.argv[1:]
    if len(args) != 1 or args[0].startswith("-"):
        print(doc or "usage: SCRIPT OUT_DIR", file=sys.stderr)
        sys.exit(0 if args in (["-h"], ["--help"]) else 2)
    return Path(args[0])


def write_result(out: Path, name: str, data: dict, markdown: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2, default=str))
    (out / f"{name}.md").write_text(markdown.rstrip() + "\n")


def md_table(headers: list[str], rows: list[list[object]]) -> str:
    def fmt(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
