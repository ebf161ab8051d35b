"""Recovery time and goodput of an elastic job under injected worker failures, in local mode.

``alnair up`` (simulated GPUs here; ``--gpus ""`` with ``--interceptor`` on a real one), a
real-torch job (``tests/integration/elastic_job/train_elastic.py``: gloo, checkpoint every 5
steps), then ``--kills`` times: wait until the job runs with its full world and has made
progress, SIGKILL one worker's torchrun (a crashed node) and time

* detection: the kill → the controller's state counts the failure (restarts + 1),
* rendezvous: the kill → Running again (a closed round, survivors and replacement),
* first step: the kill → the first training step finished after that rendezvous,
* resumed: the kill → the first training step finished after it, at any world size (for
  ``torch-inprocess`` the survivors go on before the replacement joins),

reported as p50/p90. Then ``--goodput`` runs: the same job killed every ``--every`` seconds of
wall time until it finishes, goodput = steps × the undisturbed step time / wall time, from
the job's first step to its last (steps redone after a restore count as lost), next to the
controller's own goodput figure. ``--scale`` first times a scale-up and a scale-down: the job
(1..world) starts beside a blocker workload holding half the card's compute, grows to its full
world when the blocker ends, and shrinks to 1 by ``alnair job scale``: each is timed from its
cause (the blocker's exit, the command) to Running at the new size and to the first step
trained at that size, with the step time at each size. The platform then runs with the
controller's resize hysteresis off (``ALNAIR_RESCALE_INTERVAL_SECONDS=0``; by default a job keeps
a new size for 300 s, so a scale-up waits up to that long by design). ``--launcher
torch-elastic torch-inprocess`` runs the kills and the goodput runs once per launcher on the
same platform (``torch-inprocess``: ``train_inprocess.py``, the same job on
``alnair_trainer.ElasticTrainer``, which keeps the trainers alive across rounds).

    .venv/bin/python services/elastic_job/bench/recovery_bench.py --kills 20 --goodput 60 120
    .venv/bin/python services/elastic_job/bench/recovery_bench.py --launcher torch-elastic torch-inprocess \
      --kills 10 --goodput 60
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "integration" / "elastic_job"))

from local_jobs import P, local_platform, steps  # noqa: E402

from alnair_common.testing import wait_until  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def steady_step_seconds(log: list[tuple[int, int, float]], world: int) -> float:
    gaps = [b[2] - a[2] for a, b in zip(log, log[1:], strict=False) if a[1] == b[1] == world and b[0] == a[0] + 1]
    return statistics.median(gaps)


def kill_one(platform, name: str, rng: random.Random) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    record = platform.record(name)
    victim = rng.choice([w.uid for w in record.state.workers])
    t = time.monotonic()
    os.kill(platform.worker_pid(victim), signal.SIGKILL)
    return t, record.state.restarts


def recovery_round(platform, name: str, ckpt: Path, world: int, rng: random.Random,  # type: ignore[no-untyped-def]
                   steady: bool = True) -> dict[str, float]:
    wait_until(platform.running_with(name, world), timeout=120, interval=0.2, what="full world")
    if steady:  # progress at the full world: not a kill in the moment its round closes
        before = len(steps(ckpt))
        wait_until(lambda: len(log := steps(ckpt)) >= before + 10 and all(s[1] == world for s in log[-10:]),
                   timeout=120, interval=0.2, what="progress")
    killed, restarts = kill_one(platform, name, rng)
    wall_killed = time.time()
    detected = wait_until(lambda: (r := platform.record(name)) is not None and r.state.restarts > restarts and r,
                          timeout=120, interval=0.05, what="failure counted")
    t_detect = time.monotonic() - killed
    wait_until(lambda: (r := platform.record(name)) is not None and r.state.phase == P.JOB_PHASE_RUNNING
               and r.state.restarts > restarts, timeout=120, interval=0.05, what="running again")
    t_rdzv = time.monotonic() - killed
    first = wait_until(lambda: next((s for s in steps(ckpt) if s[2] > wall_killed + t_rdzv), None),
                       timeout=120, interval=0.05, what="a step after the rendezvous")
    # A step already under way when the kill came finishes at the full world: not a resumption.
    resumed = next((s for s in steps(ckpt) if s[2] > wall_killed and s[1] < world), first)
    return {"detect_s": t_detect, "rendezvous_s": t_rdzv, "first_step_s": first[2] - wall_killed,
            "resumed_s": resumed[2] - wall_killed,
            "recovering": float(detected.state.phase == P.JOB_PHASE_RECOVERING)}


def first_step_at(ckpt: Path, world: int, after: float) -> float:
    found = wait_until(lambda: next((s for s in steps(ckpt) if s[1] == world and s[2] > after), None),
                       timeout=120, interval=0.05, what=f"a step with a world of {world}")
    return found[2]


def scale_phase(platform, args, work: Path, job_env: dict[str, str]) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Up when capacity frees (a blocker at 50 % compute ends), down by command; timed from each cause."""
    ckpt = work / "ckpt-scale"
    ckpt.mkdir()
    blocker = platform.blocker(memory=8, compute=50)
    try:
        platform.submit("scale", ckpt=ckpt, steps=10**6, step_sleep=args.step_sleep, min_replicas=1,
                        max_replicas=args.world, compute=args.compute, env=job_env, launcher=args.launcher[0])
        half = min(args.world, 50 // args.compute)
        wait_until(platform.running_with("scale", half, after_step=10), timeout=180, interval=0.2,
                   what=f"the job Running with the {half} workers that fit beside the blocker")
        before = len(steps(ckpt))
        wait_until(lambda: len(steps(ckpt)) >= before + 20, timeout=120, interval=0.2, what="progress")
        freed = time.time()
        platform.release(blocker)
    finally:
        blocker.kill()
    wait_until(platform.running_with("scale", args.world), timeout=120, interval=0.05, what="grown")
    grown = time.time() - freed
    up_step = first_step_at(ckpt, args.world, freed) - freed
    at = len(steps(ckpt))
    wait_until(lambda: len(steps(ckpt)) >= at + 20, timeout=120, interval=0.2, what="progress at full size")
    asked = time.time()
    done = platform.cli("job", "scale", "scale", "1")
    assert done.returncode == 0, done.stderr
    wait_until(platform.running_with("scale", 1), timeout=120, interval=0.05, what="shrunk")
    shrunk = time.time() - asked
    down_step = first_step_at(ckpt, 1, asked) - asked
    at = len(steps(ckpt))
    wait_until(lambda: len(steps(ckpt)) >= at + 20, timeout=120, interval=0.2, what="progress at 1")
    log = steps(ckpt)
    platform.cli("job", "delete", "scale")
    restarts = platform.record("scale").state.restarts
    return {"up_running_s": grown, "up_first_step_s": up_step, "down_running_s": shrunk,
            "down_first_step_s": down_step, "restarts": float(restarts),
            f"step_s_world_{half}": steady_step_seconds(log, half),
            f"step_s_world_{args.world}": steady_step_seconds(log, args.world),
            "step_s_world_1": steady_step_seconds(log, 1)}


def failure_phases(platform, args, work: Path, job_env: dict[str, str], launcher: str,  # type: ignore[no-untyped-def]
                   rng: random.Random) -> dict[str, object]:
    """The kills, then the goodput runs, of one launcher's job."""
    results: dict[str, object] = {}
    tag = "ip-" if launcher == "torch-inprocess" else ""
    if args.kills:
        ckpt = work / f"ckpt-{launcher}-kills"
        ckpt.mkdir()
        platform.submit(f"{tag}kills", ckpt=ckpt, steps=10**6, step_sleep=args.step_sleep, min_replicas=2,
                        max_replicas=args.world, compute=args.compute, restarts=10 * args.kills, env=job_env,
                        launcher=launcher)
        rounds = []
        for i in range(args.kills):
            rounds.append(recovery_round(platform, f"{tag}kills", ckpt, args.world, rng,
                                         steady=args.kill_at == "steady"))
            print(f"{launcher} kill {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in rounds[-1].items()
                                                          if k.endswith("_s")), flush=True)
        platform.cli("job", "delete", f"{tag}kills")
        summary = {k: {"p50": pct([r[k] for r in rounds], 0.5), "p90": pct([r[k] for r in rounds], 0.9),
                       "max": max(r[k] for r in rounds)}
                   for k in ("detect_s", "rendezvous_s", "first_step_s", "resumed_s")}
        results["recovery"] = summary
        results["step_seconds"] = steady_step_seconds(steps(ckpt), args.world)
        print(json.dumps(summary, indent=1), flush=True)
    for i, every in enumerate(args.goodput):
        name = f"{tag}goodput-{int(every)}" + (f"-{i}" if args.goodput.count(every) > 1 else "")
        ckpt = work / f"ckpt-{name}"
        ckpt.mkdir()
        platform.submit(name, ckpt=ckpt, steps=args.goodput_steps, step_sleep=args.step_sleep,
                        min_replicas=2, max_replicas=args.world, compute=args.compute, restarts=1000,
                        env=job_env, launcher=launcher)
        wait_until(platform.running_with(name, args.world), timeout=120, interval=0.2, what="running")
        kills, next_kill = 0, time.monotonic() + every
        while True:
            r = platform.record(name)
            if r is not None and r.state.phase in (P.JOB_PHASE_SUCCEEDED, P.JOB_PHASE_FAILED):
                break
            if time.monotonic() >= next_kill and r is not None and r.state.phase == P.JOB_PHASE_RUNNING:
                kill_one(platform, name, rng)
                kills += 1
                next_kill = time.monotonic() + every
            time.sleep(0.2)
        log = steps(ckpt)
        wall = log[-1][2] - log[0][2]
        useful = args.goodput_steps * steady_step_seconds(log, args.world)
        results[name] = {"phase": r.state.phase, "kills": kills, "wall_s": wall,
                         "goodput": useful / wall, "controller_goodput": r.state.goodput_ratio,
                         "steps_logged": len(log)}
        print(name, json.dumps(results[name]), flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--goodput", type=float, nargs="*", default=[60.0, 120.0],
                    help="seconds between injected failures, one job run each")
    ap.add_argument("--gpus", default="sim:4x80")
    ap.add_argument("--interceptor", default="")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--compute", type=int, default=30)
    ap.add_argument("--step-sleep", type=float, default=0.1)
    ap.add_argument("--goodput-steps", type=int, default=1500)
    ap.add_argument("--scale", action="store_true", help="time a scale-up and a scale-down first")
    ap.add_argument("--launcher", nargs="+", default=["torch-elastic"], choices=["torch-elastic", "torch-inprocess"],
                    help="the kills and goodput runs once per launcher (the --scale phase: the first)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--kill-at", choices=["steady", "round"], default="steady",
                    help="steady: after 10 steps at the full world; round: as soon as the job runs at its full "
                         "world again, while the new round's groups start (the worst moment to lose a member)")
    ap.add_argument("--keep", type=Path, help="work in this new directory and leave it (logs, steps, workspaces)")
    args = ap.parse_args()
    rng = random.Random(1)
    job_env = {"DEVICE": args.device, "WIDTH": str(args.width)}
    up_args = ("--interceptor", args.interceptor) if args.interceptor else ()
    results: dict[str, object] = {"command": " ".join(sys.argv), "world": args.world}
    with contextlib.ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="alnair-recovery-")))
        work.mkdir(parents=True, exist_ok=True)
        env = {"ALNAIR_RESCALE_INTERVAL_SECONDS": "0"} if args.scale else None
        with local_platform(work, args.gpus, env=env, up_args=up_args) as platform:
            if args.scale:
                results["scale"] = scale_phase(platform, args, work, job_env)
                print("scale", json.dumps(results["scale"]), flush=True)
            for launcher in args.launcher:
                results[launcher] = failure_phases(platform, args, work, job_env, launcher, rng)
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
