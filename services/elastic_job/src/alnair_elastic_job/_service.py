"""The elastic job service."""

from __future__ import annotations

from alnair_common import Service


class ElasticJobService(Service):
    name = "elastic-job"
    role = "skeleton: connected and healthy; runs no training jobs yet"
