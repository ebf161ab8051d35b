"""The scheduler's domain objects: what it reasons about, free of protobuf.

Everything here is validated on construction by :mod:`._convert`; the placement code can
trust that a :class:`Request` fits the units (GiB, percent of one card) and that a
:class:`Card` has a positive capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from alnair_common import PermanentError
from alnair_common.annotations import POD_GROUP_LABEL as POD_GROUP_LABEL  # re-exported
from alnair_common.annotations import SCHEDULING_PROFILE as PROFILE_ANNOTATION

from ._errors import InvalidRequestError, SchedulerError

SCHEDULER_NAME = "alnair-scheduler"
MAX_COMPUTE_PERCENT = 100


class Profile(StrEnum):
    """How to choose among the cards that fit."""

    COST_SAVING = "cost-saving"
    HIGH_PERFORMANCE = "high-performance"
    UTILISATION_AWARE = "utilisation-aware"

    @classmethod
    def parse(cls, value: str) -> Profile:
        try:
            return cls(value.strip())
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise InvalidRequestError(
                "unknown-profile",
                f"scheduling profile {value!r} is unknown; set {PROFILE_ANNOTATION} to one of {known}",
            ) from None


class Adapter(StrEnum):
    """Who reports a workload's lifecycle: kube-bridge for pods, the local agent for local
    workloads (``WorkloadEvent.source`` is "kube-bridge" or "local-agent@<host>")."""

    KUBE_BRIDGE = "kube-bridge"
    LOCAL_AGENT = "local-agent"

    @classmethod
    def of_source(cls, source: str) -> Adapter | None:
        """The adapter kind of a source ("local-agent@host" → LOCAL_AGENT); None if unknown."""
        try:
            return cls(source.split("@", 1)[0])
        except ValueError:
            return None


class Phase(StrEnum):
    PENDING = "pending"
    BOUND = "bound"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True)
class WorkloadId:
    uid: str
    name: str
    namespace: str
    mode: int = 0

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Request:
    """One card's worth of resources: ``memory_gib`` GiB and ``compute_percent`` % of it."""

    memory_gib: int
    compute_percent: int

    def __str__(self) -> str:
        return f"{self.memory_gib} GiB and {self.compute_percent} %"


@dataclass
class Workload:
    ref: WorkloadId
    request: Request | None
    phase: Phase
    scheduler_name: str
    sequence: int
    created_at: float
    profile: str | None = None
    pod_group: str | None = None
    node: str = ""
    # Why the request cannot be read (bad units); reported instead of placing.
    invalid: InvalidRequestError | None = None
    # Who sent the event, as it says (``WorkloadEvent.source``; see Adapter.of_source).
    source: str = ""
    # Cache keys of the data sets it reads (``ai.centaurus.io/dataset``), and why that
    # annotation could not be read (then no data-locality preference).
    datasets: tuple[str, ...] = ()
    dataset_error: str = ""

    @property
    def group_key(self) -> str | None:
        return f"{self.ref.namespace}/{self.pod_group}" if self.pod_group else None


@dataclass(frozen=True)
class Card:
    node: str
    uuid: str
    index: int
    memory_gib: int
    compute_percent: int
    healthy: bool = True
    health_reason: str = ""
    # MPS mode: a share's compute is an SM partition; placed exactly as a time slice (the
    # card's compute is never over-committed in either mode).
    mps: bool = False


@dataclass(frozen=True)
class Share:
    """A workload's committed part of one card."""

    workload: WorkloadId
    memory_gib: int
    compute_percent: int
    pod_group: str = ""
    profile: str = ""
    committed_at: float = 0.0
    scheduler: str = ""


@dataclass(frozen=True)
class Assignment:
    node: str
    gpu_uuid: str
    gpu_index: int
    memory_gib: int
    compute_percent: int
    profile: Profile
    filtered_at: float
    reason: str = ""  # why this card, for people (BindDecision.reason)


@dataclass(frozen=True)
class Rejection:
    """Why one node cannot take a workload (``code`` for machines, ``message`` for people)."""

    node: str
    code: str
    message: str


@dataclass(frozen=True)
class Failure:
    """A workload that stays pending, with its reason; ``permanent`` when retrying cannot help."""

    workload: WorkloadId
    code: str
    reason: str
    rejections: tuple[Rejection, ...] = ()
    permanent: bool = False


@dataclass
class Gang:
    """A PodGroup: members are placed all-or-nothing, at least ``min_member`` at once."""

    namespace: str
    name: str
    uid: str
    api_version: str
    kind: str
    min_member: int
    timeout_seconds: int
    created_at: float
    phase: str = "Pending"
    deleted: bool = False
    failed_reason: str = ""
    last_status: tuple[str, int, str] | None = field(default=None, repr=False)
    # When the group first failed to fit with all its members present (starvation guard).
    blocked_since: float | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class ImplausibleEventError(SchedulerError, PermanentError):
    """A workload event the workload's own adapter cannot have sent (``reason``: a
    :data:`IMPLAUSIBLE_REASONS` code). The bus lets any adapter publish any workload's events;
    only the scheduler knows where a workload runs and who reports it, so it refuses the
    event (never freeing its share) and the consumer terminates it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


WRONG_NODE = "wrong-node"
WRONG_SOURCE = "wrong-source"
IMPLAUSIBLE_REASONS = (WRONG_NODE, WRONG_SOURCE)


def validate_request(memory_gib: int, compute_percent: int) -> Request:
    """Check a request's units; the message says what is wrong and how to fix it."""
    if memory_gib <= 0:
        raise InvalidRequestError(
            "invalid-memory",
            f"alnair/vgpu-memory is {memory_gib} GiB; ask for at least 1 GiB of one card",
        )
    if compute_percent < 1 or compute_percent > MAX_COMPUTE_PERCENT:
        raise InvalidRequestError(
            "invalid-compute",
            f"alnair/vgpu-compute is {compute_percent} %, but one card has {MAX_COMPUTE_PERCENT} %; "
            "ask for 1..100 (Alnair places a workload on one card and never splits it)",
        )
    return Request(memory_gib, compute_percent)
