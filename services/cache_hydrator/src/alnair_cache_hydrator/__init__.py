"""Alnair cache hydrator."""

from ._service import CacheHydratorService

__all__ = ["CacheHydratorService"]
