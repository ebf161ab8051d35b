"""Records real NVML data while real workloads run, for the tests that cannot have a GPU.

The exporter, the device plugin and the profiler replay these files in CI. One recording is
a JSON-lines file: a ``header`` (GPU inventory, the workloads and their labels), one
``sample`` per period (device queries and per-process utilisation/memory, exactly the
fields NVML returned) and a ``truth`` trailer (each workload's iteration end times).

    python nvml_record.py inventory OUT.json
    python nvml_record.py run --name two_jobs --seconds 20 --out DIR \
        'cnn_train --batch 128' 'transformer_train --batch 32'
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pynvml as nv

HERE = Path(__file__).resolve().parent

# How each workload of the zoo is labelled for the profiler's training detection.
TRAINING = {"cnn_train", "transformer_train", "mlp_train", "dataload_train"}


def _try(fn, *args, default=None):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except nv.NVMLError:
        return default


def inventory() -> dict:
    nv.nvmlInit()
    gpus = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        major, minor = _try(nv.nvmlDeviceGetCudaComputeCapability, h, default=(0, 0))
        gpus.append({
            "index": i,
            "uuid": nv.nvmlDeviceGetUUID(h),
            "name": nv.nvmlDeviceGetName(h),
            "memory_total_bytes": mem.total,
            "sm_count": _sm_count(i),
            "compute_capability": f"{major}.{minor}",
            "pci_bus_id": _try(lambda x: nv.nvmlDeviceGetPciInfo(x).busId, h),
            "power_limit_mw": _try(nv.nvmlDeviceGetPowerManagementLimit, h),
            "max_sm_clock_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
            "ecc_mode": _try(lambda x: nv.nvmlDeviceGetEccMode(x)[0], h),
            "mig_mode": _try(lambda x: nv.nvmlDeviceGetMigMode(x)[0], h),
        })
    return {
        "driver_version": nv.nvmlSystemGetDriverVersion(),
        "cuda_driver_version": nv.nvmlSystemGetCudaDriverVersion_v2(),
        "nvml_version": nv.nvmlSystemGetNVMLVersion(),
        "gpus": gpus,
    }


def _sm_count(index: int) -> int:
    """NVML has no SM count; ask the CUDA driver through torch in a child (keeps us clean)."""
    code = f"import torch;print(torch.cuda.get_device_properties({index}).multi_processor_count)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def device_sample(h) -> dict:  # type: ignore[no-untyped-def]
    util = _try(nv.nvmlDeviceGetUtilizationRates, h)
    mem = nv.nvmlDeviceGetMemoryInfo(h)
    return {
        "utilization_gpu_pct": util.gpu if util else None,
        "utilization_memory_pct": util.memory if util else None,
        "memory_used_bytes": mem.used,
        "memory_total_bytes": mem.total,
        "power_mw": _try(nv.nvmlDeviceGetPowerUsage, h),
        "temperature_c": _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
        "ecc_volatile_total": _try(nv.nvmlDeviceGetTotalEccErrors, h,
                                   nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
        "pcie_tx_kbps": _try(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES),
        "pcie_rx_kbps": _try(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES),
    }


def process_samples(h, uuid: str, since_us: int) -> tuple[list[dict], int]:  # type: ignore[no-untyped-def]
    """Per-process utilisation samples newer than ``since_us`` and per-process memory."""
    memory = {p.pid: p.usedGpuMemory for p in
              (_try(nv.nvmlDeviceGetComputeRunningProcesses, h, default=[]) or [])}
    util = _try(nv.nvmlDeviceGetProcessUtilization, h, since_us, default=[]) or []
    latest = since_us
    rows: dict[int, dict] = {}
    for s in util:
        latest = max(latest, s.timeStamp)
        rows[s.pid] = {"pid": s.pid, "uuid": uuid, "sm_util_pct": s.smUtil,
                       "mem_util_pct": s.memUtil, "timestamp_us": s.timeStamp}
    for pid, used in memory.items():
        rows.setdefault(pid, {"pid": pid, "uuid": uuid, "sm_util_pct": None,
                              "mem_util_pct": None, "timestamp_us": None})
        rows[pid]["used_memory_bytes"] = used
    return list(rows.values()), latest


@dataclass
class Started:
    """A workload process being recorded, with its label and where its truth and region are."""

    proc: subprocess.Popen
    argv: list[str]
    truth: Path
    family: str
    is_training: bool
    region: Path | None = None  # the interceptor's region (its workspace), when hooked


def run(name: str, seconds: float, interval: float, out_dir: Path, specs: list[str]) -> Path:
    tmp = Path(tempfile.mkdtemp())
    started = []
    for n, spec in enumerate(specs):
        argv = shlex.split(spec)
        truth = tmp / f"truth{n}.txt"
        env = {**os.environ, "ALNAIR_TRUTH_FILE": str(truth)}
        proc = subprocess.Popen([sys.executable, str(HERE / "workloads.py"), *argv,
                                 "--seconds", str(seconds)], env=env)
        started.append(Started(proc, argv, truth, argv[0], argv[0] in TRAINING))
    return record(name, interval, out_dir / f"{name}.jsonl", started)


def record(name: str, interval: float, path: Path, started: list[Started], region_every: int = 5) -> Path:
    """Samples NVML every ``interval`` s (and hooked workloads' launch signatures every
    ``region_every`` samples, as the exporter reads regions) until every workload has ended."""
    nv.nvmlInit()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    uuids = [nv.nvmlDeviceGetUUID(h) for h in handles]
    regions = _region_module() if any(w.region for w in started) else None
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    since = [int(t0 * 1e6)] * len(handles)
    with open(path, "w") as f:
        header = {"kind": "header", "scenario": name, "started_at": t0, "interval_s": interval,
                  "inventory": inventory(),
                  "workloads": [{"pid": w.proc.pid, "spec": " ".join(w.argv), "workload": w.argv[0],
                                 "family": w.family, "is_training": w.is_training,
                                 "interceptor": w.region is not None} for w in started]}
        f.write(json.dumps(header) + "\n")
        tick_n = 0
        while any(w.proc.poll() is None for w in started):
            tick = time.time()
            gpus, processes = [], []
            for i, h in enumerate(handles):
                gpus.append({"index": i, "uuid": uuids[i], **device_sample(h)})
                rows, since[i] = process_samples(h, uuids[i], since[i])
                processes += rows
            row = {"kind": "sample", "t": round(tick - t0, 4), "gpus": gpus, "processes": processes}
            if regions is not None and tick_n % region_every == 0:
                row["launches"] = _launches(regions, started)
            f.write(json.dumps(row) + "\n")
            tick_n += 1
            time.sleep(max(0.0, interval - (time.time() - tick)))
        truth = {"kind": "truth", "workloads": []}
        for w in started:
            times = [float(x) - t0 for x in w.truth.read_text().split()] if w.truth.exists() else []
            truth["workloads"].append({"pid": w.proc.pid, "workload": w.argv[0], "exit_code": w.proc.returncode,
                                       "iteration_end_s": [round(t, 6) for t in times]})
        f.write(json.dumps(truth) + "\n")
    return path


def _region_module():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(HERE.parents[1] / "native" / "cuda_intercept" / "bench"))
    from bench_common import region_module  # noqa: PLC0415

    return region_module()


def _launches(regions, started: list[Started]) -> list[dict]:  # type: ignore[no-untyped-def]
    """Each hooked workload's launch signature now, as a CudaSample would carry it."""
    out = []
    for w in started:
        if w.region is None or not w.region.exists():
            continue
        try:
            region = regions.read_region(w.region)
        except Exception:  # noqa: BLE001 - a region being written is read at the next tick
            continue
        for slot in region.active():
            out.append({"pid": w.proc.pid, "slot_pid": slot.pid, "period_ns": slot.iteration_period_ns,
                        "repeats": slot.iterations})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    inv = sub.add_parser("inventory")
    inv.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("--name", required=True)
    r.add_argument("--seconds", type=float, default=20)
    r.add_argument("--interval", type=float, default=0.1)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("specs", nargs="+")
    a = p.parse_args()
    if a.cmd == "inventory":
        a.out.write_text(json.dumps(inventory(), indent=2) + "\n")
    else:
        print(run(a.name, a.seconds, a.interval, a.out, a.specs))


if __name__ == "__main__":
    main()
