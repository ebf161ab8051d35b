"""Alnair profiler: one profile per workload (maxima, deciles, training detection, peak memory).

Public door: the service and its settings, the store (for ``alnair profile``), the pure
analysis functions the evaluation and the tests use, and :class:`ProfilerError`, the root of
the profiler's errors.
"""

from ._detection import (
    KernelNameReport,
    LaunchReport,
    TrainingDetection,
    detect,
    detect_from_kernel_names,
    detect_from_launches,
    detect_from_utilisation,
)
from ._errors import ProfilerError
from ._peak_memory import PeakPrediction, predict_peak
from ._profile import ANNOTATION_PREFIX, SERIES, OwnerProfile, WorkloadProfile
from ._series import SeriesSummary
from ._service import ProfilerService
from ._settings import ProfilerSettings
from ._store import ProfileStore, StoreUnavailableError, open_store

__all__ = [
    "ANNOTATION_PREFIX",
    "SERIES",
    "KernelNameReport",
    "LaunchReport",
    "OwnerProfile",
    "PeakPrediction",
    "ProfileStore",
    "ProfilerError",
    "ProfilerService",
    "ProfilerSettings",
    "SeriesSummary",
    "StoreUnavailableError",
    "TrainingDetection",
    "WorkloadProfile",
    "detect",
    "detect_from_kernel_names",
    "detect_from_launches",
    "detect_from_utilisation",
    "open_store",
    "predict_peak",
]
