"""The exporter service."""

from __future__ import annotations

from alnair_common import Service


class ExporterService(Service):
    name = "exporter"
    role = "skeleton: connected and healthy; measures nothing yet (GPU/CUDA metrics arrive with the exporter issue #8)"
