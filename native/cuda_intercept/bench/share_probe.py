"""What does NVML's per-process utilisation measure while processes time-share a GPU?

No interceptor: process A paces itself (in Python) at a fraction of the throughput it has
alone, process B runs a matmul loop flat out or paced too. A's true share of the GPU is its
throughput divided by its throughput alone (its kernels take the same GPU time either way).
Every raw NVML per-process sample and the device utilisation are recorded, so each candidate
signal for the compute limiter can be compared with the truth:
  activity   NVML smUtil of the process
  normalised device utilisation x smUtil / sum of every process's smUtil

    python share_probe.py OUT_DIR          (worker: python share_probe.py --worker RATE SECONDS START)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import child_env, md_table, out_dir, write_result

RUN_S = 10.0
SETTLE_S = 3.0
BATCH = 10


def worker(rate: float, seconds: float, start_at: float) -> None:
    """Matmul batches; rate > 0 paces to `rate` matmuls/s, 0 runs flat out."""
    import torch

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    while time.time() < start_at:
        time.sleep(0.001)
    marks, n, t0 = [], 0, time.time()
    while (now := time.time()) - t0 < seconds:
        if rate > 0 and n > rate * (now - t0):
            time.sleep(min(0.002, (n - rate * (now - t0)) / rate))
            continue
        for _ in range(BATCH):
            a @ b
        torch.cuda.synchronize()
        n += BATCH
        marks.append((time.time(), n))
    print(json.dumps({"marks": marks}))


class NvmlRecorder:
    """Every raw per-process sample (deduplicated by timestamp) and device utilisation."""

    def __init__(self) -> None:
        import threading

        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.proc: dict[tuple[int, int], int] = {}  # (pid, ts_us) -> smUtil
        self.device: list[tuple[float, int]] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        last = 0
        while not self.stop_event.is_set():
            try:
                for s in self.nvml.nvmlDeviceGetProcessUtilization(self.handle, last):
                    self.proc[(s.pid, s.timeStamp)] = s.smUtil
                    last = max(last, s.timeStamp)
            except self.nvml.NVMLError:
                pass
            self.device.append((time.time(), self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))
            self.stop_event.wait(0.02)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)

    def proc_mean(self, pid: int, t0: float, t1: float) -> float | None:
        vals = [u for (p, ts), u in self.proc.items() if p == pid and t0 <= ts / 1e6 <= t1]
        return statistics.fmean(vals) if vals else None

    def proc_period(self, pid: int) -> float | None:
        ts = sorted(t for (p, t) in self.proc if p == pid)
        gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:], strict=False)]
        return statistics.median(gaps) if gaps else None

    def device_mean(self, t0: float, t1: float) -> float:
        return statistics.fmean(u for t, u in self.device if t0 <= t <= t1)


def rate_of(marks: list, t0: float, t1: float) -> float:
    inside = [m for m in marks if t0 <= m[0] <= t1]
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def run(rates: list[float], rec: NvmlRecorder) -> list[dict]:
    start_at = time.time() + 12.0  # both import torch and warm up first
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(r), str(RUN_S), str(start_at)],
            env=child_env(False),
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in rates
    ]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    t0, t1 = start_at + SETTLE_S, start_at + RUN_S - 0.5
    dev = rec.device_mean(t0, t1)
    res = []
    for r, p, o in zip(rates, procs, outs, strict=True):
        res.append({"paced": r, "pid": p.pid, "rate": rate_of(o["marks"], t0, t1),
                    "smutil": rec.proc_mean(p.pid, t0, t1), "device": dev,
                    "sample_period_s": rec.proc_period(p.pid)})
    return res


def main(out: Path) -> None:
    rec = NvmlRecorder()
    data: dict = {"runs": []}
    rows = []
    try:
        solo = run([0.0], rec)[0]
        full = solo["rate"]
        data["solo"] = solo
        plans = [(0.15, 0.0), (0.3, 0.0), (0.5, 0.0), (0.0, 0.0), (0.3, 0.7), (0.3, 0.5), (0.1, 0.6)]
        for fa, fb in plans:
            rs = run([fa * full, fb * full], rec)
            data["runs"].append(rs)
            total_act = sum(r["smutil"] or 0 for r in rs)
            for name, f, r in zip("AB", (fa, fb), rs, strict=True):
                share = 100 * r["rate"] / full
                act = r["smutil"]
                norm = r["device"] * act / total_act if act and total_act else None
                rows.append([f"{fa:.2f}/{fb:.2f}", name, f if f else "flat out", share, act, norm,
                             r["device"], r["sample_period_s"]])
            write_result(out, "share_probe", data, "")
    finally:
        rec.stop()
    md = "## NVML per-process utilisation under time-sharing (share probe)\n\n"
    md += f"A alone: {full:.0f} matmul/s (smUtil {solo['smutil']}, device {solo['device']:.1f}).\n\n"
    md += md_table(["pacing A/B", "proc", "paced at", "true share %", "smUtil %", "normalised %",
                    "device %", "sample period s"], rows)
    write_result(out, "share_probe", data, md)
    print(md)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    else:
        main(out_dir(__doc__))
