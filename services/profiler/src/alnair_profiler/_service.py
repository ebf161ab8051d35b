"""The profiler service."""

from __future__ import annotations

from alnair_common import Service


class ProfilerService(Service):
    name = "profiler"
    role = "skeleton: connected and healthy; records no profiles yet (profiler issue #9)"
