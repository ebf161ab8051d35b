"""The scheduler service."""

from __future__ import annotations

from alnair_common import Service


class SchedulerService(Service):
    name = "scheduler"
    role = "skeleton: connected and healthy; places no workloads yet (scheduler issue #7)"
