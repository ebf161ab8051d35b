"""The cache hydrator service."""

from __future__ import annotations

from alnair_common import Service


class CacheHydratorService(Service):
    name = "cache-hydrator"
    role = "skeleton: connected and healthy; caches no datasets yet"
