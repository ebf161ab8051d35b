"""Alnair exporter."""

from ._service import ExporterService

__all__ = ["ExporterService"]
