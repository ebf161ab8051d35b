"""Every subject of the Alnair bus, the message it carries and how it travels.

This table is the single source of truth: publishers and subscribers format subjects
through the functions below, streams and buckets are provisioned from ``STREAMS`` and
``BUCKETS``, and ``docs/subjects.md`` is generated from it (``scripts/gen-proto``).
Subjects go general → specific with identifiers last.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import Enum

from google.protobuf.message import Message

from alnair.v1 import (
    cache_pb2,
    commands_pb2,
    inventory_pb2,
    job_pb2,
    metrics_pb2,
    platform_pb2,
    profile_pb2,
    scheduling_pb2,
    workload_pb2,
)

from .errors import PermanentError, UnknownSubjectError

PREFIX = "alnair"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


# The identities on the bus (one NATS user each). Every service is one; ``platform`` is the
# local supervisor (`alnair up`) and ``cli`` the user's `alnair` command. The server lets each
# publish and read only what the table below names for it (alnair_common.bus_permissions).
SERVICES = ("scheduler", "kube-bridge", "local-agent", "device-plugin", "exporter", "profiler",
            "elastic-job", "cache-hydrator", "admission-webhook")
ROLES = (*SERVICES, "platform", "cli")
ADAPTERS = ("kube-bridge", "local-agent")
# Readers of every subject and bucket (`alnair events`, `ps`, `logs`, `status`): they may read
# all, never decide.
READ_ALL = ("cli", "platform")
# In a pattern's publishers or readers: each service for the subject with its own name in
# place of the one placeholder (``alnair.error.<service>``, ``alnair.health.<service>``).
EACH_SERVICE = "<each service>"


class Transport(Enum):
    """How a subject travels. STREAM survives restarts; CORE is fire-and-forget; REQUEST waits."""

    STREAM = "jetstream"
    CORE = "core"
    REQUEST = "request-reply"


def wildcard(pattern: str) -> str:
    """``pattern`` with each ``<placeholder>`` replaced by ``*``."""
    return re.sub(r"<[a-z_]+>", "*", pattern)


@dataclass(frozen=True)
class SubjectSpec:
    pattern: str
    message: type[Message]
    transport: Transport
    description: str
    stream: str | None = None
    reply: type[Message] | None = None
    # Who may publish on it (for a request: who may ask) and who consumes it (for a request:
    # who answers), besides READ_ALL. The server's permissions are generated from these.
    publishers: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()

    @property
    def wildcard(self) -> str:
        """The pattern with each ``<placeholder>`` replaced by ``*``, for subscriptions."""
        return wildcard(self.pattern)

    def matches(self, subject: str) -> bool:
        want = self.wildcard.split(".")
        have = subject.split(".")
        return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    description: str
    max_age_seconds: float = 7 * 24 * 3600.0
    duplicate_window_seconds: float = 120.0
    # Whichever comes first, age or size: the oldest messages go (JetStream's discard old).
    # JetStream reserves each cap from the server's store (8 GB in k8s/base/nats): all the
    # caps together stay well under it.
    max_bytes: int = 512 << 20


@dataclass(frozen=True)
class BucketSpec:
    name: str
    description: str
    history: int = 5
    max_bytes: int = 64 << 20
    writers: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()


S = SubjectSpec
SUBJECTS: tuple[SubjectSpec, ...] = (
    S("alnair.workload.events", workload_pb2.WorkloadEvent, Transport.STREAM,
      "Lifecycle of every workload (pod or local process).", stream="WORKLOADS",
      publishers=ADAPTERS,
      readers=("scheduler", "device-plugin", "exporter", "profiler", "elastic-job")),
    S("alnair.workload.submit", workload_pb2.Workload, Transport.STREAM,
      "A local workload asks to be scheduled (`alnair run`).", stream="WORKLOADS",
      publishers=("cli",), readers=("local-agent",)),
    S("alnair.node.<node>.inventory", inventory_pb2.NodeInventory, Transport.STREAM,
      "GPU inventory of a node, the full list on each change.", stream="INVENTORY",
      publishers=("device-plugin", *ADAPTERS), readers=("scheduler",)),
    S("alnair.metrics.gpu.<node>", metrics_pb2.NodeSampleBatch, Transport.CORE,
      "Device, per-process and host samples of one node for one period.",
      publishers=("exporter",), readers=("profiler", "scheduler")),
    S("alnair.metrics.cuda.<node>.<workload>", metrics_pb2.CudaSample, Transport.CORE,
      "CUDA-level counters of one workload from the interceptor's region.",
      publishers=("exporter",), readers=("profiler",)),
    S("alnair.sched.bind", scheduling_pb2.BindDecision, Transport.STREAM,
      "The scheduler placed a workload on a node and card.", stream="SCHEDULING",
      publishers=("scheduler",), readers=(*ADAPTERS, "device-plugin", "exporter")),
    S("alnair.sched.bound", scheduling_pb2.BindResult, Transport.STREAM,
      "An adapter carried out (or failed) a bind decision.", stream="SCHEDULING",
      publishers=ADAPTERS, readers=("scheduler",)),
    S("alnair.sched.failed", scheduling_pb2.SchedulingFailure, Transport.STREAM,
      "A workload could not be placed, with the reason per node.", stream="SCHEDULING",
      publishers=("scheduler",), readers=("elastic-job",)),
    S("alnair.podgroup.events", commands_pb2.PodGroup, Transport.STREAM,
      "Every change of a PodGroup (gang) as kube-bridge sees it.", stream="WORKLOADS",
      publishers=("kube-bridge",), readers=("scheduler",)),
    S("alnair.cmd.annotate", commands_pb2.AnnotateCommand, Transport.STREAM,
      "Set annotations under ai.centaurus.io/ on an object.", stream="COMMANDS",
      publishers=("profiler",), readers=ADAPTERS),
    S("alnair.cmd.event", commands_pb2.RecordEventCommand, Transport.STREAM,
      "Record a Kubernetes Event on an object.", stream="COMMANDS",
      publishers=("scheduler",), readers=ADAPTERS),
    S("alnair.cmd.status", commands_pb2.StatusUpdateCommand, Transport.STREAM,
      "Merge-patch a custom resource's status.", stream="COMMANDS",
      publishers=("scheduler",), readers=ADAPTERS),
    S("alnair.cmd.result", commands_pb2.CommandResult, Transport.STREAM,
      "An adapter's answer to a command.", stream="COMMANDS", publishers=ADAPTERS),
    S("alnair.job.<name>.state", job_pb2.JobState, Transport.STREAM,
      "State of a training job.", stream="JOBS", publishers=("elastic-job",),
      readers=("kube-bridge",)),
    S("alnair.cmd.job.<name>", job_pb2.JobCommand, Transport.STREAM,
      "Submit, scale or delete a training job (`alnair job`, or a TrainingJob object through "
      "kube-bridge).", stream="COMMANDS", publishers=("cli", "kube-bridge"),
      readers=("elastic-job",)),
    S("alnair.job.<name>.rendezvous", job_pb2.RendezvousRound, Transport.STREAM,
      "A round of a training job's rendezvous closed, with its members.", stream="JOBS",
      publishers=ADAPTERS, readers=("elastic-job",)),
    S("alnair.job.<name>.step", job_pb2.StepReport, Transport.CORE,
      "Training progress of a job (newest step, its duration), relayed by the adapter.",
      publishers=ADAPTERS, readers=("elastic-job",)),
    S("alnair.cmd.workers.<name>", job_pb2.WorkerPlan, Transport.STREAM,
      "What a training job's workers should be: how many live, which to stop.",
      stream="COMMANDS", publishers=("elastic-job",), readers=ADAPTERS),
    S("alnair.profile.completed", profile_pb2.WorkloadProfile, Transport.STREAM,
      "Profile of a finished workload.", stream="PROFILES", publishers=("profiler",)),
    S("alnair.cache.<dataset>.status", cache_pb2.CacheDatasetStatus, Transport.STREAM,
      "Hydration status of a cached dataset.", stream="CACHE", publishers=("cache-hydrator",),
      readers=("kube-bridge",)),
    S("alnair.cache.requests", cache_pb2.CacheDatasetRequest, Transport.STREAM,
      "Add or remove a cached dataset (`alnair dataset add/rm`, Dataset objects and "
      "annotated pods on Kubernetes).", stream="CACHE",
      publishers=("cli", "kube-bridge"), readers=("cache-hydrator",)),
    S("alnair.error.<service>", platform_pb2.ErrorEvent, Transport.STREAM,
      "Errors someone may wait on: rejected input, failed commands.", stream="ERRORS",
      publishers=(EACH_SERVICE,), readers=("kube-bridge",)),
    S("alnair.health.<service>", platform_pb2.StatusRequest, Transport.REQUEST,
      "Ask one service for its health.", reply=platform_pb2.HealthReport,
      publishers=READ_ALL, readers=(EACH_SERVICE,)),
    S("alnair.platform.status", platform_pb2.StatusRequest, Transport.REQUEST,
      "Ask the local supervisor (`alnair up`) for its process table.",
      reply=platform_pb2.PlatformStatus, publishers=("cli",), readers=("platform",)),
)
del S

STREAMS: tuple[StreamSpec, ...] = (
    StreamSpec("WORKLOADS", ("alnair.workload.>", "alnair.podgroup.>"),
               "Workload and PodGroup lifecycle, local submissions."),
    StreamSpec("COMMANDS", ("alnair.cmd.>",), "Commands to adapters and their results."),
    StreamSpec("INVENTORY", ("alnair.node.*.inventory",), "Node GPU inventories."),
    StreamSpec("SCHEDULING", ("alnair.sched.>",), "Scheduling decisions and failures."),
    StreamSpec("JOBS", ("alnair.job.*.state", "alnair.job.*.rendezvous"),
               "Training job states and rendezvous rounds."),
    StreamSpec("PROFILES", ("alnair.profile.>",), "Finished workload profiles."),
    StreamSpec("CACHE", ("alnair.cache.*.status", "alnair.cache.requests"),
               "Dataset cache requests and status."),
    StreamSpec("ERRORS", ("alnair.error.>",), "Error events.", max_age_seconds=24 * 3600.0,
               max_bytes=64 << 20),
)

# The KV buckets, by name: services open them through these (TypedKV.open refuses any other).
NODE_INVENTORY_BUCKET = "node_inventory"
GPU_ALLOCATIONS_BUCKET = "gpu_allocations"
WORKLOAD_STATES_BUCKET = "workload_states"
PODGROUP_STATES_BUCKET = "podgroup_states"
LEASES_BUCKET = "leases"
CACHE_DATASETS_BUCKET = "cache_datasets"
TRAINING_JOBS_BUCKET = "training_jobs"

BUCKETS: tuple[BucketSpec, ...] = (
    BucketSpec(NODE_INVENTORY_BUCKET, "NodeInventory per node; the scheduler rebuilds from it.",
               writers=("device-plugin", *ADAPTERS), readers=("scheduler", "elastic-job")),
    BucketSpec(GPU_ALLOCATIONS_BUCKET, "Committed GPU shares per card, updated by compare-and-set.",
               writers=("scheduler",),
               readers=(*ADAPTERS, "device-plugin", "exporter", "elastic-job")),
    BucketSpec(WORKLOAD_STATES_BUCKET, "Last WorkloadEvent an adapter published per workload uid: "
               "a restarted adapter neither repeats nor skips a transition; the cache "
               "hydrator reads which data sets live workloads name, a restarted elastic-job "
               "controller which job each live worker belongs to.",
               writers=ADAPTERS, readers=("scheduler", "cache-hydrator", "elastic-job")),
    BucketSpec(PODGROUP_STATES_BUCKET, "Last PodGroup kube-bridge published per PodGroup uid.",
               writers=("kube-bridge",), readers=("scheduler",)),
    BucketSpec(LEASES_BUCKET, "Who leads each replicated service (alnair_common.leadership).",
               history=1, writers=("scheduler", "elastic-job")),
    BucketSpec(CACHE_DATASETS_BUCKET, "Latest CacheDatasetStatus (with its spec) per dataset: what "
               "`alnair dataset ls` shows and what a restarted cache hydrator resumes; the "
               "scheduler reads where each data set is hot (`nodes`).",
               writers=("cache-hydrator",), readers=("scheduler", "kube-bridge", "admission-webhook")),
    BucketSpec(TRAINING_JOBS_BUCKET, "TrainingJobRecord per job (`<namespace>.<name>`): spec, state and "
               "worker sets, from which a restarted elastic-job controller resumes.",
               writers=("elastic-job",)),
)


def token(value: str) -> str:
    """One subject token for a name (node, workload, dataset, service).

    Kubernetes names may hold dots (``ip-10-0-0-1.ec2.internal``), which NATS reads as token
    separators. Letters, digits, ``-`` and ``_`` stay as they are; every other character is
    written ``~XX`` (its UTF-8 bytes in hex), so the token is reversible with
    :func:`name_of` and never contains ``.``, ``*``, ``>`` or spaces.
    """
    if not value:
        raise PermanentError("an empty name cannot be a subject token")
    if _TOKEN.match(value):
        return value
    return "".join(c if _TOKEN.match(c) else "".join(f"~{b:02X}" for b in c.encode())
                   for c in value)


def name_of(token_: str) -> str:
    """The name a token was made from (inverse of :func:`token`)."""
    if "~" not in token_:
        return token_
    raw = bytearray()
    i = 0
    while i < len(token_):
        if token_[i] == "~":
            raw.append(int(token_[i + 1:i + 3], 16))
            i += 3
        else:
            raw += token_[i].encode()
            i += 1
    return raw.decode()


def check_pattern(pattern: str) -> str:
    """``pattern`` if NATS accepts it as a subscription subject; PermanentError saying why not."""
    tokens = pattern.split(".")
    problem = None
    if not pattern.strip():
        problem = "it is empty"
    elif any(not t for t in tokens):
        problem = "it has an empty token (two dots in a row, or a dot at an end)"
    elif any(c.isspace() for c in pattern):
        problem = "it holds white space"
    elif any(t != ">" and ">" in t or t != "*" and "*" in t for t in tokens):
        problem = "a wildcard must be a whole token (* or >)"
    elif ">" in tokens[:-1]:
        problem = "> may only be the last token"
    if problem:
        raise PermanentError(f"subject {pattern!r} is not valid: {problem}; e.g. alnair.> or "
                             "alnair.workload.*")
    return pattern


@functools.lru_cache(maxsize=8192)
def spec_for(subject: str) -> SubjectSpec:
    """The table entry a concrete subject belongs to (cached: it runs on every message)."""
    for spec in SUBJECTS:
        if spec.matches(subject):
            return spec
    raise UnknownSubjectError(f"subject {subject!r} is not in alnair_common.subjects.SUBJECTS")


def workload_events() -> str:
    return "alnair.workload.events"


def workload_submit() -> str:
    return "alnair.workload.submit"


def node_inventory(node: str) -> str:
    return f"alnair.node.{token(node)}.inventory"


def gpu_metrics(node: str) -> str:
    return f"alnair.metrics.gpu.{token(node)}"


def cuda_metrics(node: str, workload: str) -> str:
    return f"alnair.metrics.cuda.{token(node)}.{token(workload)}"


def sched_bind() -> str:
    return "alnair.sched.bind"


def sched_bound() -> str:
    return "alnair.sched.bound"


def sched_failed() -> str:
    return "alnair.sched.failed"


def podgroup_events() -> str:
    return "alnair.podgroup.events"


def cmd_annotate() -> str:
    return "alnair.cmd.annotate"


def cmd_event() -> str:
    return "alnair.cmd.event"


def cmd_status() -> str:
    return "alnair.cmd.status"


def cmd_result() -> str:
    return "alnair.cmd.result"


def job_state(name: str) -> str:
    return f"alnair.job.{token(name)}.state"


def job_command(name: str) -> str:
    return f"alnair.cmd.job.{token(name)}"


def job_rendezvous(name: str) -> str:
    return f"alnair.job.{token(name)}.rendezvous"


def job_workers(name: str) -> str:
    return f"alnair.cmd.workers.{token(name)}"


def job_step(name: str) -> str:
    return f"alnair.job.{token(name)}.step"


def profile_completed() -> str:
    return "alnair.profile.completed"


def cache_status(dataset: str) -> str:
    return f"alnair.cache.{token(dataset)}.status"


def cache_requests() -> str:
    return "alnair.cache.requests"


def error(service: str) -> str:
    return f"alnair.error.{token(service)}"


def health(service: str) -> str:
    return f"alnair.health.{token(service)}"


def platform_status() -> str:
    return "alnair.platform.status"


def _who(names: tuple[str, ...]) -> str:
    return ", ".join(names)


def markdown_table() -> str:
    """The subject table as Markdown, for docs/subjects.md."""
    rows = ["| subject | message | transport | stream | meaning | published by | read by |",
            "|---|---|---|---|---|---|---|"]
    for s in SUBJECTS:
        msg = s.message.DESCRIPTOR.full_name
        if s.reply is not None:
            msg += f" → {s.reply.DESCRIPTOR.full_name}"
        rows.append(
            f"| `{s.pattern}` | `{msg}` | {s.transport.value} | {s.stream or ''} | {s.description} "
            f"| {_who(s.publishers)} | {_who(s.readers)} |"
        )
    rows += ["", "| bucket | meaning | written by | read by | history | size cap |",
             "|---|---|---|---|---|---|"]
    for b in BUCKETS:
        rows.append(f"| `{b.name}` | {b.description} | {_who(b.writers)} | {_who(b.readers)} "
                    f"| {b.history} | {b.max_bytes >> 20} MiB |")
    rows += ["", "| stream | subjects | kept for | size cap |", "|---|---|---|---|"]
    for st in STREAMS:
        rows.append(f"| {st.name} | {', '.join(f'`{x}`' for x in st.subjects)} "
                    f"| {st.max_age_seconds / 86400:g} d | {st.max_bytes >> 20} MiB |")
    return "\n".join(rows) + "\n"


def document() -> str:
    """The whole of docs/subjects.md (regenerated by scripts/gen-proto)."""
    return (
        "# Bus subjects\n\nGenerated from `alnair_common.subjects` by `scripts/gen-proto`; "
        "do not edit.\n\nThe NATS server lets each identity publish and read only what this "
        "table names for it (`alnair_common.bus_permissions`); "
        f"{_who(READ_ALL)} also read everything. "
        "For a request subject, *published by* is who may ask and *read by* who answers; "
        f"`{EACH_SERVICE}` means each service on the subject with its own name.\n\n"
        + markdown_table()
    )
