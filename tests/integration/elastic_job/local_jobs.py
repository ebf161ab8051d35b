"""Driving a training job in local mode as a user does: `alnair up` on simulated GPUs,
`alnair job submit` from a shell with torch on its PATH, the job's state read from the bus.

Shared by the end-to-end tests and ``services/elastic_job/bench/recovery_bench.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from alnair.v1 import job_pb2
from alnair_cli._job import history, records
from alnair_cli._platform import BusTarget, PlatformInfo
from alnair_common.natsd import free_port
from alnair_common.testing import wait_until

ALNAIR = [sys.executable, "-m", "alnair_cli"]
SCRIPT = Path(__file__).with_name("train_elastic.py")
SCRIPTS = {"torch-elastic": SCRIPT, "torch-inprocess": Path(__file__).with_name("train_inprocess.py")}
CKPT_EVERY = 5
P = job_pb2
JOB = """
apiVersion: alnair.centaurus.io/v1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  launcher: {launcher}
  command: [{python}, {script}]
  minReplicas: {min}
  maxReplicas: {max}
  worker: {worker}
  restartPolicy: {{maxRestarts: {restarts}, backoffSeconds: 1, maxBackoffSeconds: 5}}
  deadlines: {{schedulingTimeoutSeconds: 120, rendezvousTimeoutSeconds: 60}}
"""


@dataclass
class Platform:
    data_dir: Path
    work: Path

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*ALNAIR, *args, "--data-dir", str(self.data_dir)], capture_output=True,
                              text=True, timeout=60, env={**(env or os.environ), "COLUMNS": "250"})

    def on_bus(self, work):  # type: ignore[no-untyped-def]
        async def run():  # type: ignore[no-untyped-def]
            info = PlatformInfo.read(self.data_dir)
            assert info is not None
            bus = await BusTarget.find(self.data_dir, info.nats_url).connect()
            try:
                return await work(bus)
            finally:
                await bus.drain()
        return asyncio.run(run())

    def submit(self, name: str, *, ckpt: Path, steps: int, step_sleep: float, min_replicas: int,
               max_replicas: int, compute: int = 30, restarts: int = 50,
               env: dict[str, str] | None = None, launcher: str = "torch-elastic",
               script: Path | None = None, memory: int = 8,
               whole_gpu: bool = False) -> subprocess.CompletedProcess[str]:
        """``script`` instead of the launcher's test script; ``whole_gpu``: ``gpus: 1`` per
        worker instead of ``memory`` GiB and ``compute`` % of a card."""
        spec = self.work / f"{name}.yaml"
        worker = "{gpus: 1}" if whole_gpu else f"{{gpuMemoryGiB: {memory}, gpuComputePercent: {compute}}}"
        spec.write_text(JOB.format(name=name, python=sys.executable, script=script or SCRIPTS[launcher],
                                   min=min_replicas, max=max_replicas, worker=worker, restarts=restarts,
                                   launcher=launcher))
        env = {**os.environ, "CKPT_DIR": str(ckpt), "STEPS": str(steps), "STEP_SLEEP": str(step_sleep),
               "CKPT_EVERY": str(CKPT_EVERY), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               **(env or {})}
        done = self.cli("job", "submit", str(spec), env=env)
        assert done.returncode == 0, done.stderr
        return done

    def blocker(self, *, memory: int, compute: int) -> subprocess.Popen[bytes]:
        """Another user's workload holding a share (`alnair run … sleep`), once it runs; end it
        with :meth:`release`, and kill it in a ``finally``."""
        proc = subprocess.Popen([*ALNAIR, "run", "--name", "blocker", "--gpu-memory", str(memory), "--gpu-compute",
                                 str(compute), "--data-dir", str(self.data_dir), "--", "sleep", "3600"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: "blocker" in (ps := self.cli("ps").stdout) and "running" in ps, timeout=60,
                       interval=0.5, what="the blocker running")
        except BaseException:
            proc.kill()
            raise
        return proc

    @staticmethod
    def release(blocker: subprocess.Popen[bytes]) -> None:
        """Ctrl-C of the blocker's `alnair run`: it withdraws its workload, freeing the share."""
        blocker.send_signal(signal.SIGINT)
        blocker.wait(60)

    def record(self, name: str) -> job_pb2.TrainingJobRecord | None:
        found = [r for r in self.on_bus(records) if r.state.spec.name == name]
        return found[0] if found else None

    def transitions(self, name: str) -> list[tuple[int, int]]:
        """(phase, world size) of every published state, oldest first."""
        return [(s.phase, s.replicas) for s in self.on_bus(lambda bus: history(bus, name, "default"))]

    def running_with(self, name: str, n: int, *, after_step: int = 0, restarts: int = 0,
                     ) -> Callable[[], job_pb2.TrainingJobRecord | None]:
        def probe() -> job_pb2.TrainingJobRecord | None:
            r = self.record(name)
            # Not the Completing reason: phase Running while the last workers exit after the
            # job's end, which a wait for progress must not take for a running job.
            ok = (r is not None and r.state.phase == P.JOB_PHASE_RUNNING and r.state.reason != "Completing"
                  and r.state.replicas == n and r.step > after_step and r.state.restarts >= restarts)
            return r if ok else None
        return probe

    def wait_running(self, name: str, n: int, *, timeout: float, what: str, after_step: int = 0,
                     restarts: int = 0) -> job_pb2.TrainingJobRecord:
        """:meth:`running_with` waited for; a timeout says where the job was instead (its
        phase, reason and message, and every (phase, world size) it went through)."""
        try:
            return wait_until(self.running_with(name, n, after_step=after_step, restarts=restarts),
                              timeout=timeout, interval=0.5, what=what)
        except TimeoutError as e:
            r = self.record(name)
            where = ("no record" if r is None else
                     f"phase {P.JobPhase.Name(r.state.phase)} ({r.state.reason}: {r.state.message}), "
                     f"{r.state.replicas} workers, step {r.step}, {r.state.restarts} restarts")
            raise TimeoutError(f"{e}; the job: {where}; transitions {self.transitions(name)}") from None

    def finished(self, name: str, timeout: float) -> job_pb2.TrainingJobRecord:
        def probe() -> job_pb2.TrainingJobRecord | None:
            r = self.record(name)
            return r if r is not None and r.state.phase in (P.JOB_PHASE_SUCCEEDED, P.JOB_PHASE_FAILED) else None
        return wait_until(probe, timeout=timeout, interval=1.0, what=f"job {name} finished")

    def worker_pid(self, uid: str) -> int:
        """The worker's command: its torchrun (what a crashed node loses), or for
        torch-inprocess the trainer itself."""
        return int((self.data_dir / "workloads" / uid / "child.pid").read_text())

    def rendezvous_host_pid(self, name: str) -> int | None:
        for pid_file in (self.data_dir / "jobs" / f"default.{name}" / "rendezvous").glob("*/pid"):
            pid = int(pid_file.read_text().split()[0])
            if Path(f"/proc/{pid}").exists():
                return pid
        return None

    def kill_rendezvous_host(self, name: str, world: int, restarts: int) -> None:
        """SIGKILL the job's rendezvous host: every worker loses its rendezvous, so the job
        must restart as a new gang (Recovering) with a new host and run with ``world``."""
        host = self.rendezvous_host_pid(name)
        assert host is not None, "no running rendezvous host found"
        os.kill(host, signal.SIGKILL)
        self.wait_running(name, world, restarts=restarts, timeout=120,
                          what="the job Running again after its rendezvous host was killed")
        assert P.JOB_PHASE_RECOVERING in [p for p, _ in self.transitions(name)]
        assert self.rendezvous_host_pid(name) not in (None, host)

    def nats_violations(self) -> list[str]:
        return [ln for ln in (self.data_dir / "logs" / "nats-server.log").read_text().splitlines()
                if "Violation" in ln]


@contextlib.contextmanager
def local_platform(work: Path, gpus: str, env: dict[str, str] | None = None,
                   up_args: tuple[str, ...] = ()) -> Iterator[Platform]:
    """`alnair up` (``gpus``: ``sim:<n>x<GiB>``, or "" for the machine's own through NVML);
    everything it and its workloads started is gone after."""
    data_dir = work / "alnair"
    gpu_args = ("--gpus", gpus) if gpus else ()
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(free_port()),
                           *gpu_args, *up_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})
    platform = Platform(data_dir, work)
    try:
        wait_until(lambda: platform.cli("status", "--json").returncode == 0, timeout=150,
                   interval=1.0, what="every service ready")
        yield platform
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
        for workspace in (data_dir / "workloads").glob("*"):  # workers outlive `alnair up`
            pid_file = workspace / "pid"
            if pid_file.exists() and not (workspace / "exit_code").exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.killpg(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        for pid_file in (data_dir / "jobs").glob("*/rendezvous/*/pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)


def steps(ckpt: Path) -> list[tuple[int, int, float]]:
    """(step, world size, unix time) of every step rank 0 finished, in order (train_inprocess.py
    adds its pid to each line)."""
    try:
        lines = (ckpt / "steps.log").read_text().splitlines()
    except OSError:
        return []
    return [(int(f[0]), int(f[1]), float(f[2])) for f in (line.split() for line in lines) if len(f) >= 3]


def undisturbed(ckpt: Path, total: int) -> Path:
    """The same job on one rank, never interrupted; the directory with its final.pt."""
    ckpt.mkdir(parents=True)
    began = time.monotonic()
    subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node=1",
                    "--no-python", sys.executable, str(SCRIPT)], check=True, capture_output=True, timeout=600,
                   env={**os.environ, "CKPT_DIR": str(ckpt), "STEPS": str(total), "STEP_SLEEP": "0"})
    (ckpt / "seconds").write_text(f"{time.monotonic() - began:.3f}\n")
    return ckpt


def assert_trained_like_undisturbed(platform: Platform, ckpt: Path, total: int) -> None:
    """The job ended at ``total``, never went back more than a checkpoint interval, and
    its model is an undisturbed one-rank run's (the trajectory does not depend on the world
    size)."""
    import torch  # the test's, loaded only by the tests that train

    log = steps(ckpt)
    assert log[-1][0] == total
    for (a, _, _), (b, _, _) in zip(log, log[1:], strict=False):
        assert b >= a - CKPT_EVERY, f"global step went back from {a} to {b}: more than a checkpoint interval"
    final = torch.load(ckpt / "final.pt")
    reference = torch.load(undisturbed(platform.work / "reference", total) / "final.pt")
    for k, v in reference.items():
        assert torch.allclose(final[k], v, atol=1e-5), (k, final[k], v)
    assert not platform.nats_violations()
