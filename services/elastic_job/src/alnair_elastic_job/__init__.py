"""Alnair elastic job."""

from ._service import ElasticJobService

__all__ = ["ElasticJobService"]
