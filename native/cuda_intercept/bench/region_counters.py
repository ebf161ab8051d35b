"""Benchmark 5 — the region's counters while a workload runs.

A hooked worker performs known work in phases and waits for the parent between them; the
parent reads $ALNAIR_WORKSPACE/cuda.region with alnair_common.cuda_region at each step
and compares the deltas with what the worker did:
  N element-wise kernels (x.add_(1): one cuLaunchKernel each),
  B bytes host->device (pinned), device->host, device->device (Tensor.copy_),
plus the launch signature of a repeated 12-kernel "iteration".

    python region_counters.py OUT_DIR     (worker: python region_counters.py --worker)
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench_common import child_env, md_table, out_dir, region_module, write_result

N = 10_000
B = 64 << 20


def worker() -> None:
    import torch

    def phase(name: str) -> None:
        torch.cuda.synchronize()
        print(name, flush=True)
        sys.stdin.readline()

    x = torch.zeros(1 << 10, device="cuda")
    host = torch.empty(B, dtype=torch.uint8).pin_memory()
    dev = torch.empty(B, dtype=torch.uint8, device="cuda")
    dev2 = torch.empty(B, dtype=torch.uint8, device="cuda")
    phase("ready")
    for _ in range(N):
        x.add_(1)
    phase("kernels")
    dev.copy_(host, non_blocking=True)
    phase("htod")
    host.copy_(dev, non_blocking=True)
    phase("dtoh")
    dev2.copy_(dev)
    phase("dtod")
    y = torch.ones(256, device="cuda")
    ops = [torch.Tensor.add_, torch.Tensor.mul_, torch.Tensor.sub_, torch.Tensor.div_]
    unary = [torch.sin, torch.cos, torch.exp, torch.tanh, torch.sqrt, torch.abs, torch.neg, torch.sigmoid]
    for _ in range(2000):  # one "iteration" = 12 distinct kernels
        for op in ops:
            op(y, 1.0001)
        for fn in unary:
            fn(y, out=y)
        time.sleep(0.002)
    phase("loop")


def totals(cr, path: Path) -> dict[str, int]:
    region = cr.read_region(path)
    me = [s for s in region.slots if s.state == "active"]
    d = me[0].devices[0]
    return {
        "kernels": d.kernel_launches,
        "htod": d.memcpy_htod_bytes,
        "dtoh": d.memcpy_dtoh_bytes,
        "dtod": d.memcpy_dtod_bytes,
        "period": me[0].iteration_period_launches,
        "period_ns": me[0].iteration_period_ns,
        "iterations": me[0].iterations,
    }


def main(out: Path) -> None:
    cr = region_module()
    env = child_env(True)
    path = Path(env["ALNAIR_WORKSPACE"]) / cr.FILE_NAME
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker"], env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    expected = {"kernels": ("kernels", N), "htod": ("htod", B), "dtoh": ("dtoh", B), "dtod": ("dtod", B)}
    rows, data, error = [], {}, ""
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        before = totals(cr, path)
        for ph in ("kernels", "htod", "dtoh", "dtod", "loop"):
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == ph
            time.sleep(0.05)  # > one 10 ms publication period
            now = totals(cr, path)
            data[ph] = {"before": before, "after": now}
            if ph in expected:
                key, want = expected[ph]
                got = now[key] - before[key]
                rows.append([ph, key, want, got, "match" if got == want else "MISMATCH"])
            before = now
        rows.append(
            [
                "loop",
                "iteration period (launches)",
                12,
                before["period"],
                "match" if before["period"] == 12 else "check",
            ]
        )
        rows.append(
            ["loop", "iterations seen / period ns", "~2000", f"{before['iterations']} / {before['period_ns']}", ""]
        )
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
    except Exception as exc:  # noqa: BLE001
        error = repr(exc)
        proc.kill()
    md = "## 5. Region counters while the workload runs\n\n"
    md += md_table(["phase", "counter", "workload did", "region delta", "result"], rows)
    if error:
        md += f"\n\nError: {error}"
    write_result(out, "5_region_counters", {"phases": data, "error": error}, md)
    print(md)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--worker":
        worker()
    else:
        main(out_dir(__doc__))
