"""alnair_common: what every Alnair service shares.

The bus (:mod:`alnair_common.bus`), the subject table (:mod:`alnair_common.subjects`),
settings, logging, health and the service runtime. Test fixtures live in
:mod:`alnair_common.testing`.
"""

from . import subjects
from .bus import (
    Bus,
    DurableConsumer,
    KVUpdate,
    KVWatch,
    NotCaughtUpError,
    StreamFollower,
    TypedKV,
    Versioned,
    ensure_streams,
    publish_error,
)
from .config import ServiceSettings, load_settings
from .errors import (
    AlnairError,
    BusUnavailableError,
    ConfigError,
    DecodeError,
    PermanentError,
    PermissionDeniedError,
    RevisionConflictError,
    TemporaryError,
    UnknownSubjectError,
)
from .health import Health, HealthServer
from .logs import configure_logging, get_logger
from .service import Service, run_service

__all__ = [
    "AlnairError",
    "Bus",
    "BusUnavailableError",
    "ConfigError",
    "DecodeError",
    "DurableConsumer",
    "Health",
    "HealthServer",
    "KVUpdate",
    "KVWatch",
    "NotCaughtUpError",
    "PermanentError",
    "PermissionDeniedError",
    "RevisionConflictError",
    "Service",
    "ServiceSettings",
    "StreamFollower",
    "TemporaryError",
    "TypedKV",
    "UnknownSubjectError",
    "Versioned",
    "configure_logging",
    "ensure_streams",
    "get_logger",
    "load_settings",
    "publish_error",
    "run_service",
    "subjects",
]
