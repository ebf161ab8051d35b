"""Workload lifecycle events as both adapters publish them.

kube-bridge and the local agent observe workloads differently (a watch, a child process)
but must publish the same thing: each transition once, in lifecycle order, with a sequence
that grows per workload. :class:`LifecyclePublisher` holds that rule so the two cannot
drift apart; :func:`plan_changes`, :func:`worker_command` and :func:`worker_env` do the same for a training
job's workers, and ``rendezvous_host.py`` is the c10d host both run outside the workers.
"""

from ._phases import PHASE_NAMES, TERMINAL, is_after, phase_name, rank
from ._publisher import BUCKET as STATES_BUCKET
from ._publisher import LifecyclePublisher, state_key
from ._retention import Retention, expired, forget_expired, observed_at
from ._worker_plans import (
    JOB_LABEL,
    JOB_NAMESPACE_LABEL,
    PROGRESS_ENV,
    RENDEZVOUS_LABEL,
    WORKER_ENV,
    PlanChanges,
    newer_plan_waiting,
    plan_changes,
    worker_command,
    worker_env,
    worker_labels,
)

__all__ = ["JOB_LABEL", "JOB_NAMESPACE_LABEL", "PHASE_NAMES", "PROGRESS_ENV", "RENDEZVOUS_LABEL",
           "STATES_BUCKET", "TERMINAL", "LifecyclePublisher", "PlanChanges", "Retention", "WORKER_ENV",
           "expired", "forget_expired", "is_after", "newer_plan_waiting", "observed_at", "phase_name",
           "plan_changes", "rank", "state_key", "worker_command", "worker_env", "worker_labels"]
