"""Workload lifecycle events as both adapters publish them.

kube-bridge and the local agent observe workloads differently (a watch, a child process)
but must publish the same thing: each transition once, in lifecycle order, with a sequence
that grows per workload. :class:`LifecyclePublisher` holds that rule so the two cannot
drift apart.
"""

from ._phases import PHASE_NAMES, TERMINAL, is_after, phase_name, rank
from ._publisher import LifecyclePublisher
from ._retention import Retention, expired, forget_expired, observed_at

__all__ = ["PHASE_NAMES", "TERMINAL", "LifecyclePublisher", "Retention", "expired", "forget_expired",
           "is_after", "observed_at", "phase_name", "rank"]
