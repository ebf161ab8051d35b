"""Issue 19's H200 measurements of the interceptor, in one command (~6 min).

    python3 scripts/gpu/issue19_h200.py --lib LIB --testlib TESTLIB --trusted DIR --out OUT

(a) compute: one process per workload (bf16 4096² matmul loop, CUDA-graph replay of 10 such
    matmuls, a launch-bound loop of tiny kernels) runs alone with the interceptor and no
    limit, then at 90/70/50/30/10 %, then alone again: the limit is set live through the
    region header's compute_percent (the interceptor reads it every control period and
    takes the stricter of it and its own). Throughput share = rate at the limit / rate
    alone, the mean of the first and the last phase (a warming process runs its first
    phase slower), same process, same run.
(b) memory: under a 4 GiB limit PyTorch, JAX and CuPy allocate until refused; nvidia-smi's
    per-process used memory is read while they hold it.
(c) container mode: the test library (its fixed limits file is DIR/limits) on the real
    driver, with a looser ALNAIR_VGPU_MEMORY_BYTES and ALNAIR_WORKSPACE pointing elsewhere.
(d) allocation latency (cuMemAlloc_v2 + cuMemFree_v2 of 2 MiB through ctypes) natively and
    hooked with 1 and with 8 processes of the workspace holding memory (ledger overhead).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
PHASES = (100, 90, 70, 50, 30, 10, 100)
SETTLE_S, MEASURE_S = 1.5, 2.5
COMPUTE_PERCENT_OFFSET = 28  # region header (ci_region_layout.h)
NO_PROBE = "ALNAIR_BENCH_NO_CLOCK_PROBE"  # "1": no nvidia-smi beside the measured loop


# ---- workers (run in their own processes) ----------------------------------------------


def set_region_limit(workspace: str, percent: int) -> None:
    with open(os.path.join(workspace, "cuda.region"), "r+b") as f, mmap.mmap(f.fileno(), 4096) as m:
        m[COMPUTE_PERCENT_OFFSET : COMPUTE_PERCENT_OFFSET + 4] = percent.to_bytes(4, "little")


def own_util(workspace: str) -> dict:
    """This process's dev-0 sm_util_percent / sm_util_source from its region slot."""
    header, slot_bytes = 512, 64 + 16 * 128
    data = Path(workspace, "cuda.region").read_bytes()
    for i in range(128):
        off = header + i * slot_bytes
        state, pid = (
            int.from_bytes(data[off + 4 : off + 8], "little"),
            int.from_bytes(data[off + 8 : off + 12], "little"),
        )
        if state == 1 and pid == os.getpid():
            dev = off + 64
            util = int.from_bytes(data[dev + 104 : dev + 108], "little")
            source = int.from_bytes(data[dev + 108 : dev + 112], "little")
            names = {0: None, 1: "gputime", 2: "nvml", 3: "nvml-device", 4: "open-loop"}
            return {"util": util, "source": names.get(source, source)}
    return {}


def gpu_clock_later(delay_s: float) -> subprocess.Popen:
    """nvidia-smi's SM clock and power `delay_s` from now, read in a process of its own
    (``.communicate()[0]``). Run inside the measured loop it stalled the loop for tens of
    ms a phase on the H100: a few per cent of an unlimited phase's rate, less of a
    throttled one (its token bucket refilled meanwhile), so every limit read high."""
    q = "--query-gpu=clocks.sm,power.draw"
    return subprocess.Popen(
        ["sh", "-c", f"sleep {delay_s:.3f}; exec nvidia-smi {q} --format=csv,noheader"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def compute_worker(kind: str) -> None:
    import torch

    ws = os.environ["ALNAIR_WORKSPACE"]
    if kind == "small":
        x = torch.zeros(1024, device="cuda")

        def step() -> int:
            for _ in range(200):
                x.add_(1.0)
            return 200

    else:
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        if kind == "graph":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    a @ b
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(10):
                    a @ b

            def step() -> int:
                g.replay()
                return 10

        else:

            def step() -> int:
                for _ in range(10):
                    a @ b
                return 10

    def pause(phase_start: float) -> float:
        """"pausing": without a limit, 60 ms idle in every 230 ms (a loop waiting for its
        data now and then); returns the seconds slept, left out of the rate."""
        into = (time.perf_counter() - phase_start) % 0.23
        if kind != "pausing" or limit < 100 or into < 0.17:
            return 0.0
        time.sleep(0.23 - into)
        return 0.23 - into

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    phases = []
    for limit in PHASES:
        set_region_limit(ws, limit)
        probe = gpu_clock_later(SETTLE_S + MEASURE_S / 2) if os.environ.get(NO_PROBE) != "1" else None
        t_start = time.perf_counter()
        while time.perf_counter() < t_start + SETTLE_S:
            step()
            torch.cuda.synchronize()
            pause(t_start)
        n, t0, paused = 0, time.perf_counter(), 0.0
        while time.perf_counter() - t0 < MEASURE_S:
            n += step()
            torch.cuda.synchronize()
            paused += pause(t_start)
        rate = n / (time.perf_counter() - t0 - paused)
        clock = probe.communicate()[0].strip() if probe is not None else ""
        phases.append({"limit": limit, "rate": rate, "clock_power": clock, **own_util(ws)})
    print(json.dumps({"phases": phases}))


def smi_used_mib(pid: int) -> dict:
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
    ).stdout
    apps = {}
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            apps[int(parts[0])] = int(parts[1]) if parts[1].isdigit() else parts[1]
    return {"own_mib": apps.get(pid), "all_apps": apps}


def memory_worker(framework: str) -> None:
    held, refused = 0, None
    chunk = 256 << 20
    keep = []
    if framework == "torch":
        import torch

        torch.zeros(1, device="cuda")
        while held < 16 * GIB:
            try:
                keep.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
                held += chunk
            except torch.OutOfMemoryError as e:
                refused = str(e).splitlines()[0][:200]
                break
        torch.cuda.synchronize()
        reserved = torch.cuda.memory_reserved()
    elif framework == "jax":
        import jax
        import jax.numpy as jnp

        while held < 16 * GIB:
            try:
                keep.append(jnp.zeros(chunk // 4, dtype=jnp.float32).block_until_ready())
                held += chunk
            except Exception as e:  # noqa: BLE001 (XlaRuntimeError: RESOURCE_EXHAUSTED)
                refused = str(e).splitlines()[0][:200]
                break
        reserved = None
        stats = jax.devices()[0].memory_stats() or {}
        reserved = stats.get("bytes_reserved") or stats.get("bytes_limit")
    else:
        import cupy

        while held < 16 * GIB:
            try:
                keep.append(cupy.empty(chunk, dtype=cupy.uint8))
                held += chunk
            except cupy.cuda.memory.OutOfMemoryError as e:
                refused = str(e).splitlines()[0][:200]
                break
        cupy.cuda.Device().synchronize()
        reserved = cupy.get_default_memory_pool().total_bytes()
    time.sleep(0.5)
    print(json.dumps({"held_bytes": held, "reserved": reserved, "refused": refused, **smi_used_mib(os.getpid())}))


def cuda_ctypes():
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    try:
        retain, set_current = cu.cuDevicePrimaryCtxRetain, cu.cuCtxSetCurrent
    except AttributeError:  # the fake driver (a dry run without a GPU) needs no context
        return cu
    assert retain(ctypes.byref(ctx), dev) == 0
    assert set_current(ctx) == 0
    return cu


def holder_worker(mib: int) -> None:
    import ctypes

    cu = cuda_ctypes()
    p = ctypes.c_uint64()
    rc = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(mib << 20))
    print(json.dumps({"rc": rc}), flush=True)
    sys.stdin.read()


def latency_worker(n: int) -> None:
    import ctypes

    cu = cuda_ctypes()
    alloc, free = cu.cuMemAlloc_v2, cu.cuMemFree_v2
    p = ctypes.c_uint64()
    size = ctypes.c_size_t(2 << 20)
    ref = ctypes.byref(p)
    times = []
    for i in range(n + 200):
        t0 = time.perf_counter_ns()
        rc = alloc(ref, size)
        rc |= free(p)
        t1 = time.perf_counter_ns()
        assert rc == 0, rc
        if i >= 200:
            times.append(t1 - t0)
    times.sort()
    print(json.dumps({"median_ns": times[len(times) // 2], "p90_ns": times[int(len(times) * 0.9)]}))


def container_worker() -> None:
    import torch

    held, chunk = 0, 256 << 20
    keep = []
    while held < 8 * GIB:
        try:
            keep.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            held += chunk
        except torch.OutOfMemoryError:
            break
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({"held_bytes": held, "mem_get_info_total": total}))


# ---- orchestration -----------------------------------------------------------------------


def run(args: list[str], env: dict[str, str], timeout: float = 120, stderr_to: Path | None = None) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if stderr_to is not None:
        stderr_to.write_text(done.stderr)
    lines = [line for line in done.stdout.strip().splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr[-1500:]}"}
    return json.loads(lines[-1])


def hooked_env(lib: str, workspace: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env["LD_PRELOAD"] = lib
    if workspace:
        env["ALNAIR_WORKSPACE"] = workspace
    env.update(extra)
    return env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--testlib", required=True)
    ap.add_argument("--trusted", required=True, help="the test library's fixed limits directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="compute,memory,container,latency")
    ap.add_argument("--kinds", default="matmul,graph,small",
                    help="compute: the workloads (matmul, graph, small; pausing: the matmul loop "
                         "idle 60 ms in every 230 ms while unlimited, its rate over the time it ran)")
    ap.add_argument("--debug", action="store_true",
                    help="compute: the interceptor's debug lines of each workload to OUT/KIND.err")
    ap.add_argument("--no-clock-probe", action="store_true",
                    help="compute: no nvidia-smi reading the clock beside the measured loop (does "
                         "a driver query beside an unlimited phase slow it, so that limits read high?)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    only = a.only.split(",")

    def save() -> None:
        (out / "issue19.json").write_text(json.dumps(results, indent=1))

    if "compute" in only:
        results["compute"] = {}
        for kind in a.kinds.split(","):
            ws = tempfile.mkdtemp(prefix=f"alnair-{kind}-")
            env = hooked_env(a.lib, ws) | ({NO_PROBE: "1"} if a.no_clock_probe else {})
            env |= {"ALNAIR_CUDA_DEBUG": "1"} if a.debug else {}
            r = run(["--compute", kind], env, timeout=90, stderr_to=out / f"{kind}.err" if a.debug else None)
            if "phases" in r:
                alone = (r["phases"][0]["rate"] + r["phases"][-1]["rate"]) / 2
                r["alone_rates"] = [r["phases"][0]["rate"], r["phases"][-1]["rate"]]
                for p in r["phases"]:
                    p["share"] = 100 * p["rate"] / alone
            results["compute"][kind] = r
            print(kind, json.dumps(r), flush=True)
            save()
    if "memory" in only:
        results["memory"] = {}
        for fw in ("torch", "jax", "cupy"):
            ws = tempfile.mkdtemp(prefix=f"alnair-mem-{fw}-")
            r = run(["--memory", fw], hooked_env(a.lib, ws, ALNAIR_VGPU_MEMORY_BYTES="4Gi"), timeout=120)
            results["memory"][fw] = r
            print(fw, json.dumps(r), flush=True)
            save()
    if "container" in only:
        ws = tempfile.mkdtemp(prefix="alnair-container-")
        Path(ws, "cuda.region").touch(mode=0o666)
        trusted = Path(a.trusted)
        trusted.mkdir(parents=True, exist_ok=True)
        (trusted / "limits").write_text(f"memory_bytes = 2Gi\nworkload_id = h200/container\nworkspace = {ws}\n")
        decoy = tempfile.mkdtemp(prefix="alnair-decoy-")
        Path(decoy, "limits").write_text("compute_percent = 100\n")
        r = run(
            ["--container"],
            hooked_env(a.testlib, decoy, ALNAIR_VGPU_MEMORY_BYTES="8Gi"),
            timeout=120,
        )
        results["container"] = r
        print("container", json.dumps(r), flush=True)
        (trusted / "limits").unlink()
        save()
    if "latency" in only:
        lat: dict = {}
        env0 = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_") and k != "LD_PRELOAD"}
        lat["native"] = run(["--latency", "3000"], env0)
        for holders in (0, 7):
            ws = tempfile.mkdtemp(prefix="alnair-lat-")
            env = hooked_env(a.lib, ws, ALNAIR_VGPU_MEMORY_BYTES="32Gi")
            procs = []
            for _ in range(holders):
                p = subprocess.Popen(
                    [sys.executable, __file__, "--holder", "512"],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                procs.append(p)
            ok = [json.loads(p.stdout.readline() or "{}").get("rc") == 0 for p in procs]
            lat[f"hooked_{holders + 1}_procs"] = {**run(["--latency", "3000"], env), "holders_ok": all(ok)}
            for p in procs:
                p.stdin.close()
                p.wait(timeout=30)
        results["latency"] = lat
        print("latency", json.dumps(lat), flush=True)
        save()
    save()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--compute":
        compute_worker(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--memory":
        memory_worker(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--holder":
        holder_worker(int(sys.argv[2]))
    elif len(sys.argv) > 2 and sys.argv[1] == "--latency":
        latency_worker(int(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--container":
        container_worker()
    else:
        main()
