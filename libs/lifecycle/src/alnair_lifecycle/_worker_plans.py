"""A training job's WorkerPlan as both adapters carry it out: one rule, so they cannot drift.

The elastic-job controller publishes what a job's workers should be (``job.proto``'s
WorkerPlan); an adapter counts the job's live workers, stops the planned ones and creates
the rest (:func:`plan_changes`), labels each worker with its job (:func:`worker_labels`) and
starts it with :func:`worker_command` and :func:`worker_env` — under torchrun, or for
torch-inprocess as the trainer itself: one process per worker, the job's c10d rendezvous
hosted outside the workers (``rendezvous_host.py``), so that any worker may die without
taking the rendezvous with it.

When a worker of an elastic job dies, its peers' collectives fail at once (the connection
to it closes) and each survivor's torchrun restarts its own trainer into a new round of the
same rendezvous — the controller's Rescaling — which closes as soon as the dead worker's
keep-alive has lapsed (``KEEP_ALIVE_SECONDS`` × ``KEEP_ALIVE_ATTEMPTS``) and the round's
last call is over; the replacement the controller asks for joins the round after. So
torchrun may restart a trainer as often as the job's restart policy allows. A fixed-size
job (``launcher: torch``) gets no torchrun restarts: the controller restarts its gang. A
torch-inprocess trainer restarts nothing: it leaves its process group and joins the next
round in the same process, its model still in memory (``alnair_trainer``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from alnair.v1 import job_pb2
from alnair_common import AlnairError, Bus, get_logger, subjects

log = get_logger("alnair.lifecycle")

JOB_LABEL = "ai.centaurus.io/training-job"
JOB_NAMESPACE_LABEL = "ai.centaurus.io/training-job-namespace"
RENDEZVOUS_LABEL = "ai.centaurus.io/rendezvous-id"

# After minReplicas workers joined, a round waits this long for more (torch's default, 30 s,
# would delay every round of a job below maxReplicas by that much); a worker that comes later
# joins through a re-rendezvous, as torch elastic scales up.
LAST_CALL_SECONDS = 3
# torch-inprocess: a worker that comes later costs its peers ~1 s (no new processes), so a
# round waits less for one.
INPROCESS_LAST_CALL_SECONDS = 1
# How often torchrun looks at its worker process and at workers waiting to join.
MONITOR_SECONDS = 0.5
# A worker that stopped beating for this long is dropped from the rendezvous (torch's default
# is 5 s × 3): how long survivors wait for a dead peer before their new round can close.
KEEP_ALIVE_SECONDS = 1
KEEP_ALIVE_ATTEMPTS = 3


# Set in every worker's environment. torchrun (2.15) otherwise keeps the store address its
# rank 0 published in the first round and never publishes it again, so a worker that joins a
# running job (a scale-up, a replacement after a failure) waits forever for it.
WORKER_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# Where a worker's training script may write "<step> <seconds the step took>" (replacing the
# file each step): the adapter relays the newest step to the controller (stall detection,
# goodput). Set by the local agent to a file in the workload's workspace, by kube-bridge to
# a file its worker pod's sidecar prints.
PROGRESS_ENV = "ALNAIR_PROGRESS_FILE"


async def newer_plan_waiting(bus: Bus, plan: job_pb2.WorkerPlan) -> bool:
    """Whether the job's newest plan in the stream is newer than ``plan``, so that it is
    delivered next: an adapter then carries out ``plan``'s stops but creates nothing — its
    workers (and a rendezvous host that takes seconds to start) would only be stopped by the
    newer plan (a new gang) or counted by it (a new target). Plans are carried out one at a
    time, and plans that came while one waited were otherwise carried out late, one after
    another, although only the newest counts. Unknown (the bus did not answer, the message
    does not decode) counts as not newer: ``plan`` is carried out as it is."""
    namespace = plan.spec.namespace or "default"
    try:
        newest = await bus.newest(subjects.job_workers(plan.spec.name), job_pb2.WorkerPlan)
    except AlnairError as e:  # an optimisation, never a reason to drop a plan
        log.info("newest worker plan unknown", job=f"{namespace}/{plan.spec.name}", error=str(e))
        return False
    return (newest is not None and newest.generation > plan.generation
            and newest.spec.name == plan.spec.name and (newest.spec.namespace or "default") == namespace)


@dataclass(frozen=True)
class PlanChanges:
    """What an adapter does for one plan: stop these live workers, then create ``create``."""

    stop: tuple[str, ...]
    create: int


def plan_changes(plan: job_pb2.WorkerPlan, live: Iterable[str], pending: Iterable[str] = (),
                 gangs: Mapping[str, str] | None = None) -> PlanChanges:
    """Declarative, so a repeated or redelivered plan creates nothing twice: the live workers
    not being stopped count towards the target.

    ``pending``: the live workers not placed yet. The controller learns of a worker when it is
    placed, so it cannot name those in ``stop``; when the live workers outnumber the target
    (the grant fell while they waited for the scheduler) the adapter withdraws pending ones,
    never a running one the controller did not name.

    ``gangs``: each live worker's rendezvous id (its ``RENDEZVOUS_LABEL``). A worker of an
    earlier gang can never join this plan's (it meets in the old rendezvous, whose host is
    gone): it is stopped, never counted. The controller may not know it — one made for the
    old gang just before its host died is still unplaced — so the adapter must not wait for
    the controller to name it.

    A completing plan creates nothing: its target counts the live workers the controller
    knew of, and one that finished since (exit 0) must not be replaced."""
    alive = set(live)
    stale = {u for u, gang in (gangs or {}).items()
             if u in alive and plan.rendezvous_id and gang and gang != plan.rendezvous_id}
    stopping = (alive & set(plan.stop)) | stale
    excess = len(alive - stopping) - plan.target
    if excess > 0:
        stopping |= set(sorted((alive - stopping) & set(pending))[:excess])
    missing = 0 if plan.completing else max(0, plan.target - len(alive - stopping))
    return PlanChanges(tuple(sorted(stopping)), missing)


def worker_labels(plan: job_pb2.WorkerPlan) -> dict[str, str]:
    return {JOB_LABEL: plan.spec.name, JOB_NAMESPACE_LABEL: plan.spec.namespace or "default",
            RENDEZVOUS_LABEL: plan.rendezvous_id}


# What a torch-inprocess worker (``alnair_trainer.ElasticTrainer``) reads to meet its peers
# itself, in place of torchrun's arguments.
RENDEZVOUS_ENDPOINT_ENV = "ALNAIR_RDZV_ENDPOINT"
RENDEZVOUS_ID_ENV = "ALNAIR_RDZV_ID"
RENDEZVOUS_NODES_ENV = "ALNAIR_RDZV_NODES"
RENDEZVOUS_CONF_ENV = "ALNAIR_RDZV_CONF"


def _rendezvous_conf(spec: job_pb2.JobSpec) -> str:
    join = int(spec.deadlines.rendezvous_timeout_seconds or 60)
    last_call = INPROCESS_LAST_CALL_SECONDS if spec.launcher == job_pb2.LAUNCHER_TORCH_INPROCESS else LAST_CALL_SECONDS
    return (f"is_host=false,join_timeout={join},last_call_timeout={last_call},"
            f"keep_alive_interval={KEEP_ALIVE_SECONDS},keep_alive_max_attempt={KEEP_ALIVE_ATTEMPTS}")


def _nodes(spec: job_pb2.JobSpec) -> str:
    if spec.launcher == job_pb2.LAUNCHER_TORCH:  # a fixed-size job: exactly minReplicas
        return str(spec.min_replicas)
    return f"{spec.min_replicas}:{spec.max_replicas}"


def worker_command(plan: job_pb2.WorkerPlan, endpoint: str) -> list[str]:
    """The worker's argv: the spec's command under torchrun, meeting at ``endpoint`` — or,
    for torch-inprocess, the command itself (it meets its peers with :func:`worker_env`)."""
    spec = plan.spec
    if spec.launcher == job_pb2.LAUNCHER_TORCH_INPROCESS:
        return list(spec.command)
    restarts = 0 if spec.launcher == job_pb2.LAUNCHER_TORCH else spec.restart_policy.max_restarts
    return ["torchrun", f"--nnodes={_nodes(spec)}", "--nproc-per-node=1", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}", f"--rdzv-id={plan.rendezvous_id}",
            f"--rdzv-conf={_rendezvous_conf(spec)}", f"--max-restarts={restarts}",
            f"--monitor-interval={MONITOR_SECONDS}", "--no-python", *spec.command]


def worker_env(plan: job_pb2.WorkerPlan, endpoint: str) -> dict[str, str]:
    """What a worker's environment gets besides the job's (and the progress file)."""
    env = dict(WORKER_ENV)
    if plan.spec.launcher == job_pb2.LAUNCHER_TORCH_INPROCESS:
        env.update({RENDEZVOUS_ENDPOINT_ENV: endpoint, RENDEZVOUS_ID_ENV: plan.rendezvous_id,
                    RENDEZVOUS_NODES_ENV: _nodes(plan.spec), RENDEZVOUS_CONF_ENV: _rendezvous_conf(plan.spec)})
    return env
