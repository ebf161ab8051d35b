"""Alnair scheduler."""

from ._service import SchedulerService

__all__ = ["SchedulerService"]
