"""Alnair scheduler: places fractional-GPU workloads on cards, gangs all-or-nothing."""

from ._domain import POD_GROUP_LABEL, PROFILE_ANNOTATION, SCHEDULER_NAME, Profile
from ._service import SchedulerService, SchedulerSettings

__all__ = ["POD_GROUP_LABEL", "PROFILE_ANNOTATION", "SCHEDULER_NAME", "Profile", "SchedulerService",
           "SchedulerSettings"]
