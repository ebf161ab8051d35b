"""Real-GPU check: two PyTorch processes share one GPU under the exporter with real NVML, and
each one's usage lands on its own workload's series.

Needs an NVIDIA GPU, torch and nvidia-ml-py. With ``--interceptor`` (the built
``libalnair_cuda.so``) each workload runs preloaded with its own workspace, and the exporter
attributes NVML's PIDs through the interceptor's regions — the production path of both modes.
Without it, attribution uses the PID table of the children (checks NVML's per-process data
and the per-pod aggregation only).

    make -C native/cuda_intercept            # once, for --interceptor
    python services/exporter/bench/gpu_attribution.py --seconds 30 \\
        --interceptor native/cuda_intercept/build/libalnair_cuda.so --out /tmp/attribution.json

Exit status 0 when every check passed; the JSON has the checks and the per-period series.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alnair.v1 import workload_pb2
from alnair_exporter import NodeSampler, RegionScanner, StaticResolver, WorkloadDirectory, WorkloadUpdate
from alnair_gpu import NvmlSampler, SampleSourceError

ROOT = Path(__file__).resolve().parents[3]
WORKLOADS = {"wl-cnn": "cnn_train --batch 128", "wl-tr": "transformer_train --batch 32"}


def start(uid: str, spec: str, seconds: float, workspaces: Path, interceptor: Path | None) -> subprocess.Popen:
    env = dict(os.environ)
    if interceptor is not None:
        (workspaces / uid).mkdir(parents=True)
        env.update(LD_PRELOAD=str(interceptor.resolve()), ALNAIR_WORKSPACE=str(workspaces / uid),
                   ALNAIR_WORKLOAD_ID=uid)
    argv = [sys.executable, str(ROOT / "scripts" / "gpu" / "workloads.py"), *spec.split(), "--seconds", str(seconds)]
    return subprocess.Popen(argv, env=env)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--period", type=float, default=0.5)
    p.add_argument("--interceptor", type=Path)
    p.add_argument("--out", type=Path, default=Path("gpu_attribution.json"))
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="alnair-attribution-"))
    directory = WorkloadDirectory()
    for uid in WORKLOADS:
        event = workload_pb2.WorkloadEvent(sequence=1)
        event.workload.ref.uid, event.workload.ref.name, event.workload.ref.namespace = uid, uid, "gpu-test"
        event.workload.phase = workload_pb2.WORKLOAD_PHASE_RUNNING
        directory.apply(WorkloadUpdate.from_proto(event), time.time())
    try:
        nvml = NvmlSampler()  # before starting anything: no GPU, no run
    except SampleSourceError as e:
        print(f"gpu_attribution: {e}", file=sys.stderr)
        return 2
    procs = {uid: start(uid, spec, a.seconds, tmp, a.interceptor) for uid, spec in WORKLOADS.items()}
    table = None if a.interceptor else StaticResolver({p.pid: uid for uid, p in procs.items()})
    sampler = NodeSampler("gpu-test-node", gpu=nvml, scanner=RegionScanner(tmp, directory),
                          directory=directory, resolver=table, grace_seconds=3600)
    periods = []
    try:
        while any(p.poll() is None for p in procs.values()):
            view = sampler.sample()
            periods.append({
                "t": view.sampled_at,
                "device": [{"uuid": d.uuid, "util": d.utilization_ratio, "memory_used": d.memory_used_bytes}
                           for d in view.devices],
                "processes": [{"pid": x.sample.pid, "uid": x.workload.uid if x.workload else None,
                               "sm": x.sample.sm_utilization_ratio, "memory": x.sample.memory_used_bytes}
                              for x in view.processes],
                "pods": [{"uid": s.workload.uid, "live": s.live,
                          "gpus": [{"uuid": g.gpu_uuid, "sm": g.sm_utilization_ratio, "memory": g.memory_used_bytes}
                                   for g in s.gpus],
                          "cuda_memory": [c.memory_used_bytes for c in s.cuda]} for s in view.series],
            })
            time.sleep(a.period)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    pid_of = {uid: p.pid for uid, p in procs.items()}
    both = [q for q in periods if {x["uid"] for x in q["processes"]} >= set(WORKLOADS)]
    owners = {x["pid"]: x["uid"] for q in periods for x in q["processes"]}
    checks = {
        "both_workloads_seen_together": len(both) > 0,
        "every_gpu_process_attributed": all(uid is not None for uid in owners.values()),
        "each_pid_on_its_own_workload": all(owners.get(pid_of[uid]) == uid for uid in WORKLOADS),
        "each_pod_used_sm": all(any((g["sm"] or 0) > 0 for q in both for pod in q["pods"] if pod["uid"] == uid
                                    for g in pod["gpus"]) for uid in WORKLOADS),
        "pod_memory_within_device_memory": all(
            sum(g["memory"] for pod in q["pods"] for g in pod["gpus"]) <= max(d["memory_used"] for d in q["device"])
            for q in both),
    }
    a.out.write_text(json.dumps({"checks": checks, "pids": pid_of, "interceptor": bool(a.interceptor),
                                 "periods": periods}, indent=1))
    print(json.dumps(checks, indent=2), f"\nseries written to {a.out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
