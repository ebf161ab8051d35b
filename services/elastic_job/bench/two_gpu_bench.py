"""Elastic training across two GPUs (issue #21): scaled 1 → 2 → 1, a worker killed at 2, and two
fractional jobs divided by the allocator, in local mode (``alnair up``).

``--phases whole``: a TrainingJob (torch-elastic, ``train_transformer.py``: a ~300M-parameter
GPT in bf16, DDP over NCCL), min 1 / max 2 workers of ``gpus: 1``, starts beside a blocker
holding the second card (``alnair run``), so it runs with 1; the blocker ends → it grows to 2;
one worker's torchrun is SIGKILLed at 2 (a crashed node) → detection, rendezvous, first step,
and every survivor trainer's exit timed (a survivor stuck in a collective past the documented
60 s bound is a failure); a second job arrives (min 1 / max 1) → the allocator takes a card
back and the first runs with 1 again. Reported: throughput (samples/s) at 1 and 2 and the
scaling efficiency, each event timed from its cause, and goodput over the phase (time in
steps that were kept over wall time, from the job's first step to the end; steps redone
after a restore are lost time) beside the controller's own goodput figure.

``--phases share``: two elastic jobs whose workers each ask ``--share`` % of a card (min 1,
max ``--share-max``), the first with half the second's samples, run together under the
allocator (it divides the cards, and gives the second the first's cards when the first
ends), then the same two jobs with a static split (min = max = half the slots each), on the
same platform: each job's completion time in both. Workers that share a card use gloo (NCCL
refuses two ranks on one device).

The runs (NCCL_NVLS_ENABLE=0 always: NVLink multicast stays off on the lent machines):

    # two H200s (carry .whl; the interceptor built first)
    make -s -C native/cuda_intercept BUILD_DIR=/tmp/alnair-b lib
    bash scripts/gpu/repo_env.sh python3 services/elastic_job/bench/two_gpu_bench.py --gpus "" \\
      --interceptor /tmp/alnair-b/libalnair_cuda.so --phases whole --out "$OUT/whole.json"
    bash scripts/gpu/repo_env.sh python3 services/elastic_job/bench/two_gpu_bench.py --gpus "" \\
      --interceptor /tmp/alnair-b/libalnair_cuda.so --phases share --out "$OUT/share.json"
    # the dry run on one GPU: shares instead of whole cards, two ranks on gloo
    ... two_gpu_bench.py --gpus "" --interceptor ... --whole-share 45 --backend gloo --share 25 --share-max 4
    # the dry run on CPU (simulated cards)
    .venv/bin/python services/elastic_job/bench/two_gpu_bench.py --gpus sim:2x80 --device cpu --model tiny
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[2] / "tests" / "integration" / "elastic_job")]

from local_jobs import P, Platform, local_platform  # noqa: E402
from recovery_bench import first_step_at, recovery_round  # noqa: E402

from alnair_common.testing import wait_until  # noqa: E402

SCRIPT = HERE / "train_transformer.py"
MODELS = {  # LAYERS, DIM, HEADS, SEQ, BATCH (per rank), VOCAB
    "300m": (24, 1024, 16, 1024, 8, 32768),
    "40m": (8, 512, 8, 1024, 64, 8192),  # fewer parameters per FLOP: gloo's all-reduce goes through the host
    "tiny": (2, 64, 4, 64, 4, 1024),
}
SURVIVOR_BOUND_S = 60.0  # the elastic-job README's bound on a survivor waiting in a collective


def model_env(name: str) -> dict[str, str]:
    return dict(zip(("LAYERS", "DIM", "HEADS", "SEQ", "BATCH", "VOCAB"), map(str, MODELS[name]), strict=True))


def samples_log(ckpt: Path) -> list[tuple[int, int, float, int]]:
    """(step, world, unix time, samples done) per step of rank 0."""
    try:
        lines = (ckpt / "steps.log").read_text().splitlines()
    except OSError:
        return []
    return [(int(f[0]), int(f[1]), float(f[2]), int(f[3])) for f in (ln.split() for ln in lines) if len(f) >= 4]


def throughput(ckpt: Path, world: int, after: float, steps_wanted: int, timeout: float) -> dict[str, float]:
    """Samples/s at ``world`` over ``steps_wanted`` consecutive steps logged after ``after``
    (the first step of a run at that size is left out: it holds warm-up)."""
    def enough():  # type: ignore[no-untyped-def]
        run = [s for s in samples_log(ckpt) if s[2] > after and s[1] == world][1:]
        return run if len(run) > steps_wanted else None
    run = wait_until(enough, timeout=timeout, interval=0.5, what=f"{steps_wanted} steps at a world of {world}")
    gaps = [b[2] - a[2] for a, b in zip(run, run[1:], strict=False) if b[0] == a[0] + 1]
    step_s = statistics.median(gaps)
    per_step = run[-1][3] - run[-2][3]
    return {"world": world, "step_s": step_s, "samples_per_s": per_step / step_s}


def goodput(ckpt: Path, end: float) -> dict[str, float]:
    """Time in kept steps over wall time: a step counts its gap from the step before it when
    both ran at the same world in one run (consecutive step numbers) and it was never redone;
    gaps longer than 3× that world's median step (a rendezvous, a restore) are lost time."""
    log = samples_log(ckpt)
    last_seen = {s[0]: i for i, s in enumerate(log)}  # a step logged again later was redone
    medians = {w: statistics.median([b[2] - a[2] for a, b in zip(log, log[1:], strict=False)
                                     if a[1] == b[1] == w and b[0] == a[0] + 1] or [0.0])
               for w in {s[1] for s in log}}
    kept = 0.0
    for i, (a, b) in enumerate(zip(log, log[1:], strict=False), start=1):
        gap = b[2] - a[2]
        if last_seen[b[0]] == i and b[0] == a[0] + 1 and a[1] == b[1] and gap <= 3 * medians[b[1]]:
            kept += gap
    wall = end - log[0][2]
    return {"wall_s": wall, "kept_s": kept, "goodput": kept / wall, "steps_logged": len(log),
            "steps_redone": len(log) - len(last_seen)}


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                kids = [int(c) for c in children.read_text().split()]
                found += kids
                todo += kids
    return found


def watch_exits(pids: list[int], since: float, until: float) -> dict[int, float | None]:
    """Seconds from ``since`` (monotonic) until each pid is gone; None if alive at ``until``."""
    gone: dict[int, float | None] = dict.fromkeys(pids)
    while time.monotonic() < until and None in gone.values():
        for p in pids:
            if gone[p] is None and not Path(f"/proc/{p}").exists():
                gone[p] = time.monotonic() - since
        time.sleep(0.05)
    return gone


def whole_phase(platform: Platform, args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict:
    whole = not args.whole_share
    worker = {"whole_gpu": True} if whole else {"compute": args.whole_share, "memory": args.memory}
    out: dict[str, object] = {"worker": "gpus: 1" if whole else f"{args.whole_share} % of a card"}
    ckpt = work / "ckpt-elastic"
    ckpt.mkdir()
    hold = platform.blocker(memory=args.memory, compute=100 if whole else args.whole_share)
    try:
        platform.submit("elastic", ckpt=ckpt, steps=0, step_sleep=0, min_replicas=1, max_replicas=2,
                        restarts=20, env=env, script=SCRIPT, **worker)
        began = time.time()
        wait_until(platform.running_with("elastic", 1, after_step=2), timeout=300, interval=0.5,
                   what="the job Running with 1 beside the blocker")
        out["start_to_first_steps_s"] = time.time() - began
        out["at_1"] = throughput(ckpt, 1, began, args.measure_steps, 300)
        freed = time.time()
        platform.release(hold)
    finally:
        hold.kill()
    wait_until(platform.running_with("elastic", 2), timeout=300, interval=0.1, what="grown to 2")
    out["grow"] = {"running_s": time.time() - freed, "first_step_s": first_step_at(ckpt, 2, freed) - freed}
    out["at_2"] = throughput(ckpt, 2, freed, args.measure_steps, 300)
    out["scaling_efficiency"] = out["at_2"]["samples_per_s"] / (2 * out["at_1"]["samples_per_s"])  # type: ignore[index]
    print("scale", json.dumps(out), flush=True)

    record = platform.record("elastic")
    assert record is not None
    trainers = {w.uid: descendants(platform.worker_pid(w.uid)) for w in record.state.workers}
    watcher: dict[str, object] = {}
    t0 = time.monotonic()
    thread = threading.Thread(target=lambda: watcher.update(
        gone=watch_exits([p for ps in trainers.values() for p in ps], t0, t0 + SURVIVOR_BOUND_S + 30)))
    thread.start()
    out["kill"] = recovery_round(platform, "elastic", ckpt, 2, random.Random(1), steady=False)
    thread.join()
    exits = list(watcher["gone"].values())  # type: ignore[union-attr]
    out["kill"]["old_trainers_gone_within_s"] = None if None in exits else max(exits)  # type: ignore[index]
    out["kill"]["survivor_bound_s"] = SURVIVOR_BOUND_S  # type: ignore[index]
    out["kill"]["no_survivor_hung"] = None not in exits and max(exits) <= SURVIVOR_BOUND_S  # type: ignore[index]
    print("kill", json.dumps(out["kill"]), flush=True)

    wait_until(lambda: len([s for s in samples_log(ckpt) if s[1] == 2]) > 5, timeout=120, interval=0.5,
               what="steps at 2 after the kill")
    taker_ckpt = work / "ckpt-taker"
    taker_ckpt.mkdir()
    asked = time.time()
    platform.submit("taker", ckpt=taker_ckpt, steps=0, step_sleep=0, min_replicas=1, max_replicas=1,
                    env=env, script=SCRIPT, **worker)
    wait_until(platform.running_with("elastic", 1), timeout=300, interval=0.1, what="shrunk to 1")
    shrunk = time.time() - asked
    wait_until(platform.running_with("taker", 1, after_step=1), timeout=300, interval=0.2, what="taker training")
    out["take_back"] = {"shrunk_running_s": shrunk, "first_step_at_1_s": first_step_at(ckpt, 1, asked) - asked,
                        "taker_first_step_s": time.time() - asked}
    out["at_1_after"] = throughput(ckpt, 1, asked, args.measure_steps, 300)
    ended = time.time()
    for name in ("taker", "elastic"):
        platform.cli("job", "delete", name)
    record = platform.record("elastic")
    out["goodput"] = {**goodput(ckpt, ended), "controller_goodput": record.state.goodput_ratio if record else None,
                      "restarts": record.state.restarts if record else None}
    print("take back", json.dumps(out["take_back"]), "goodput", json.dumps(out["goodput"]), flush=True)
    return out


def share_phase(platform: Platform, args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict:
    """The two jobs under the allocator, then with a static split; completion times."""
    env = {**env, **model_env(args.share_model), "BACKEND": "gloo"}
    per_job = args.share_max // 2
    out: dict[str, object] = {"share": args.share, "max_workers": args.share_max, "static_split": per_job}
    for mode in ("allocator", "static"):
        started, done = {}, {}
        for name, samples in ((f"{mode}-a", args.share_samples // 2), (f"{mode}-b", args.share_samples)):
            ckpt = work / f"ckpt-{name}"
            ckpt.mkdir()
            lo, hi = (1, args.share_max) if mode == "allocator" else (per_job, per_job)
            platform.submit(name, ckpt=ckpt, steps=0, step_sleep=0, min_replicas=lo, max_replicas=hi, restarts=20,
                            env={**env, "SAMPLES": str(samples)}, script=SCRIPT, compute=args.share,
                            memory=args.memory)
            started[name] = time.time()
        for name in started:
            r = platform.finished(name, timeout=args.share_timeout)
            done[name] = {"phase": P.JobPhase.Name(r.state.phase), "completion_s": time.time() - started[name],
                          "worlds": sorted({s[1] for s in samples_log(work / f"ckpt-{name}")}),
                          "restarts": r.state.restarts}
        out[mode] = done
        print(mode, json.dumps(done), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", nargs="+", default=["whole", "share"], choices=["whole", "share"])
    ap.add_argument("--gpus", default="", help='"" for the machine\'s cards through NVML, or sim:2x80')
    ap.add_argument("--interceptor", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backend", default="", help="the whole phase's collectives (default: nccl on cuda)")
    ap.add_argument("--model", default="300m", choices=sorted(MODELS))
    ap.add_argument("--whole-share", type=int, default=0,
                    help="one-GPU dry run: workers and blocker ask this %% of a card instead of whole cards")
    ap.add_argument("--memory", type=int, default=24, help="GiB per worker where workers ask for shares")
    ap.add_argument("--measure-steps", type=int, default=30)
    ap.add_argument("--share", type=int, default=50)
    ap.add_argument("--share-max", type=int, default=4)
    ap.add_argument("--share-model", default="40m", choices=sorted(MODELS))
    ap.add_argument("--share-samples", type=int, default=6000, help="the second job's samples (the first: half)")
    ap.add_argument("--share-timeout", type=float, default=400)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", type=Path, help="work in this new directory and leave it (logs, steps, workspaces)")
    args = ap.parse_args()
    if args.device == "cpu" and args.model == "300m":
        args.model = args.share_model = "tiny"
    env = {"DEVICE": args.device, "NCCL_NVLS_ENABLE": "0", "CKPT_EVERY": "50", **model_env(args.model)}
    if args.backend:
        env["BACKEND"] = args.backend
    if args.device == "cuda":
        env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,P2P,NET")
    up_args = ("--interceptor", args.interceptor) if args.interceptor else ()
    results: dict[str, object] = {"command": " ".join(sys.argv), "model": args.model}
    with contextlib.ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="alnair-2gpu-")))
        work.mkdir(parents=True, exist_ok=True)
        # Resizes take effect at once (by default a job keeps a new size for 300 s).
        platform = stack.enter_context(local_platform(work, args.gpus, env={"ALNAIR_RESCALE_INTERVAL_SECONDS": "0"},
                                                      up_args=up_args))
        results["gpus"] = platform.cli("status").stdout
        for phase in args.phases:
            run = whole_phase if phase == "whole" else share_phase
            try:
                results[phase] = run(platform, args, work, env)
            except Exception as e:  # noqa: BLE001 - the other phase still runs; the failure is reported
                results[phase] = {"error": f"{type(e).__name__}: {e}"}
                print(phase, "failed:", results[phase], flush=True)
            if args.out:
                args.out.write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
