"""The local agent service."""

from __future__ import annotations

from alnair_common import Service


class LocalAgentService(Service):
    name = "local-agent"
    role = "skeleton: connected and healthy; runs no local workloads yet (adapters issue #6)"
