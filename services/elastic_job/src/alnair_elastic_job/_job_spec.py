"""TrainingJob: the one spec of every launcher, valid by construction.

Every constructor runs :meth:`TrainingJob.__post_init__`'s checks, so no invalid job exists
past the edge (a YAML file, a bus message, later the CRD). Errors use the spec's own field
paths (``spec.minReplicas``), the spelling of the YAML file and of the CRD, so one message
helps in both modes. Defaults that the proto leaves at 0 are resolved here, once.
"""

from __future__ import annotations

import math
import re
import reprlib
from dataclasses import dataclass, field
from enum import Enum

from ._errors import JobSpecError

MAX_REPLICAS = 1024
MAX_MEMORY_GIB = 4096
MAX_COMPUTE_PERCENT = 100
MAX_WHOLE_GPUS = 64
MAX_RESTARTS = 1000
DEFAULT_MAX_RESTARTS = 3
DEFAULT_BACKOFF_SECONDS = 10.0
DEFAULT_MAX_BACKOFF_SECONDS = 300.0
DEFAULT_SCHEDULING_TIMEOUT_SECONDS = 600.0
# Well under torch's 900 s join timeout and NCCL's 10-30 min: a rendezvous that has not
# completed by then is reported and retried rather than left hanging.
DEFAULT_RENDEZVOUS_TIMEOUT_SECONDS = 60.0
MAX_SECONDS = 30 * 24 * 3600.0
# A DNS-1123 label: the name becomes pod names, a PodGroup and a subject token.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

HOROVOD_REJECTED = (
    "launcher 'horovod' is not supported: Horovod is unmaintained upstream (no release in over "
    "two years) and does not build against current PyTorch (Ray and Lightning removed their "
    "Horovod integrations for that reason). Use launcher: torch-elastic (torchrun with an "
    "elastic c10d rendezvous: workers join and leave between minReplicas and maxReplicas, as "
    "Horovod elastic's host discovery did) or launcher: torch for a fixed world size."
)


class Launcher(Enum):
    """How workers are started: torchrun for torch-elastic and torch (only torch-elastic may
    change size); torch-inprocess runs the command itself, a trainer that stays alive across
    rendezvous rounds (``alnair_trainer``), elastic like torch-elastic."""

    TORCH_ELASTIC = "torch-elastic"
    TORCH = "torch"
    TORCH_INPROCESS = "torch-inprocess"

    @classmethod
    def parse(cls, value: str, where: str = "spec.launcher") -> Launcher:
        v = value.strip().lower()
        if v in ("horovod", "horovod-elastic", "elastic-horovod"):
            raise JobSpecError(where, HOROVOD_REJECTED)
        # Older spellings (JobSpec.framework before the launcher enum, the seed's EPJob).
        aliases = {"pytorch-elastic": cls.TORCH_ELASTIC, "torchelastic": cls.TORCH_ELASTIC,
                   "pytorch": cls.TORCH}
        if v in aliases:
            return aliases[v]
        try:
            return cls(v)
        except ValueError:
            raise JobSpecError(where, f"unknown launcher {shown(value)}; use torch-elastic (elastic "
                               "world size), torch-inprocess (elastic, trainers kept alive across "
                               "rounds) or torch (fixed world size)") from None


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 6, 6, 6
_REPR.maxstring, _REPR.maxother = 60, 60


def shown(value: object) -> str:
    """A value as an error message quotes it: bounded, whatever the file held. A YAML alias
    bomb (a list of ten aliases of a list of ten, eight levels deep) made ``repr`` build
    10⁸ items (``alnair job submit`` hung), and an integer of over 4,300 digits cannot be
    printed at all (ValueError in place of the error message)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 18:
        return f"a {'negative ' if value < 0 else ''}number of {value.bit_length()} bits"
    return _REPR.repr(value)


def _int(value: int, where: str, low: int, high: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(where, f"must be a whole number, got {shown(value)}")
    if not low <= value <= high:
        raise JobSpecError(where, f"is {shown(value)}, must be {low}..{high}; {hint}")
    return value


def _seconds(value: float, where: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise JobSpecError(where, f"must be a number of seconds, got {shown(value)}")
    if value < 0 or value > MAX_SECONDS or (value == 0 and not allow_zero):
        raise JobSpecError(where, f"is {shown(value)} s, must be {'0' if allow_zero else 'more than 0'}.."
                           f"{MAX_SECONDS:.0f} s (30 days)")
    return float(value)


@dataclass(frozen=True)
class WorkerRequest:
    """What one worker asks of a GPU: a fractional share of one card, or whole cards."""

    memory_gib: int = 0
    compute_percent: int = 0
    whole_gpus: int = 0

    def __post_init__(self) -> None:
        w = "spec.worker"
        if self.whole_gpus:
            _int(self.whole_gpus, f"{w}.gpus", 1, MAX_WHOLE_GPUS, "whole GPUs per worker")
            if self.memory_gib or self.compute_percent:
                raise JobSpecError(w, f"asks for gpus: {self.whole_gpus} and also for a share "
                                   f"({self.memory_gib} GiB, {self.compute_percent} %); set either "
                                   "gpus (whole cards) or gpuMemoryGiB + gpuComputePercent, not both")
            return
        if not self.memory_gib and not self.compute_percent:
            raise JobSpecError(w, "asks for no GPU; set gpus: N (whole cards) or gpuMemoryGiB and "
                               "gpuComputePercent (a share of one card)")
        _int(self.memory_gib, f"{w}.gpuMemoryGiB", 1, MAX_MEMORY_GIB,
             "ask for at least 1 GiB of one card")
        _int(self.compute_percent, f"{w}.gpuComputePercent", 1, MAX_COMPUTE_PERCENT,
             "one card has 100 %; a worker gets a share of one card, never a split across cards "
             "(use gpus: N for whole cards)")

    @property
    def gpus(self) -> float:
        """The worker's size in GPUs (0.3 for a 30 % share): the allocator's unit."""
        return float(self.whole_gpus) if self.whole_gpus else self.compute_percent / 100.0


@dataclass(frozen=True)
class RestartPolicy:
    """Failures survived, and the back-off between restarts (doubling up to a cap)."""

    max_restarts: int = DEFAULT_MAX_RESTARTS
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    max_backoff_seconds: float = DEFAULT_MAX_BACKOFF_SECONDS

    def __post_init__(self) -> None:
        p = "spec.restartPolicy"
        _int(self.max_restarts, f"{p}.maxRestarts", 0, MAX_RESTARTS, "failures the job survives")
        _seconds(self.backoff_seconds, f"{p}.backoffSeconds")
        _seconds(self.max_backoff_seconds, f"{p}.maxBackoffSeconds")
        if self.max_backoff_seconds < self.backoff_seconds:
            raise JobSpecError(f"{p}.maxBackoffSeconds", f"is {self.max_backoff_seconds} s, less than "
                               f"backoffSeconds ({self.backoff_seconds} s); raise it or lower backoffSeconds")

    def backoff(self, restarts_done: int) -> float:
        """Wait before restart number ``restarts_done + 1``."""
        return min(self.max_backoff_seconds, self.backoff_seconds * 2.0 ** min(restarts_done, 30))


@dataclass(frozen=True)
class Deadlines:
    """How long a job may wait in each phase; 0 active deadline means none."""

    scheduling_timeout_seconds: float = DEFAULT_SCHEDULING_TIMEOUT_SECONDS
    rendezvous_timeout_seconds: float = DEFAULT_RENDEZVOUS_TIMEOUT_SECONDS
    active_deadline_seconds: float = 0.0

    def __post_init__(self) -> None:
        d = "spec.deadlines"
        _seconds(self.scheduling_timeout_seconds, f"{d}.schedulingTimeoutSeconds", allow_zero=False)
        _seconds(self.rendezvous_timeout_seconds, f"{d}.rendezvousTimeoutSeconds", allow_zero=False)
        _seconds(self.active_deadline_seconds, f"{d}.activeDeadlineSeconds")


@dataclass(frozen=True)
class TrainingJob:
    """One training job: who runs it, how many workers, what each asks, how it fails."""

    name: str
    command: tuple[str, ...]
    min_replicas: int
    max_replicas: int
    request: WorkerRequest
    launcher: Launcher = Launcher.TORCH_ELASTIC
    namespace: str = "default"
    # Empty in local mode runs the command in the agent's environment; kube-bridge needs one.
    image: str = ""
    checkpoint_uri: str = ""
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    deadlines: Deadlines = field(default_factory=Deadlines)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise JobSpecError("metadata.name", f"{self.name!r} is not a DNS-1123 label; use 1..63 "
                               "lower-case letters, digits and '-', starting and ending alphanumeric")
        if not isinstance(self.namespace, str) or not _NAME.match(self.namespace):
            raise JobSpecError("metadata.namespace", f"{self.namespace!r} is not a DNS-1123 label")
        if not self.command or not all(isinstance(c, str) and c for c in self.command):
            raise JobSpecError("spec.command", "is empty or holds an empty argument; give the "
                               "training command as a list, e.g. [python, train.py]")
        _int(self.min_replicas, "spec.minReplicas", 1, MAX_REPLICAS,
             "a job needs at least one worker")
        _int(self.max_replicas, "spec.maxReplicas", 1, MAX_REPLICAS,
             "a job needs at least one worker")
        if self.min_replicas > self.max_replicas:
            raise JobSpecError("spec.minReplicas", f"is {self.min_replicas}, more than maxReplicas "
                               f"({self.max_replicas}); set minReplicas <= maxReplicas")
        if self.launcher is Launcher.TORCH and self.min_replicas != self.max_replicas:
            raise JobSpecError("spec.launcher", f"torch runs a fixed world size, but minReplicas "
                               f"({self.min_replicas}) != maxReplicas ({self.max_replicas}); set them "
                               "equal or use launcher: torch-elastic")

    @property
    def elastic(self) -> bool:
        return self.launcher is not Launcher.TORCH and self.max_replicas > self.min_replicas
