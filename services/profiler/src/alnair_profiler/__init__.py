"""Alnair profiler."""

from ._service import ProfilerService

__all__ = ["ProfilerService"]
