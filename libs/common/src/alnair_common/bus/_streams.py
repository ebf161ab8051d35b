"""Streams provisioned from the subject table, idempotently, by every service on every start.

No deploy step creates them: whichever service starts first does, and a later start updates
a stream whose limits changed in the table (the table in code is the one source of truth).
"""

from __future__ import annotations

import contextlib

import nats.js.errors
from nats.js.api import StorageType, StreamConfig

from .. import subjects
from ._client import Bus


async def ensure_streams(bus: Bus, specs: tuple[subjects.StreamSpec, ...] = subjects.STREAMS,
                         *, replicas: int = 1) -> None:
    """Create or update every stream; safe to call from every service on every start."""
    for spec in specs:
        config = StreamConfig(
            name=spec.name,
            subjects=list(spec.subjects),
            description=spec.description,
            storage=StorageType.FILE,
            max_age=spec.max_age_seconds,
            max_bytes=spec.max_bytes,
            duplicate_window=spec.duplicate_window_seconds,
            num_replicas=replicas,
        )
        try:
            await bus.js.stream_info(spec.name)
        except nats.js.errors.NotFoundError:
            with contextlib.suppress(nats.js.errors.BadRequestError):
                await bus.js.add_stream(config)
                continue
        await bus.js.update_stream(config)
