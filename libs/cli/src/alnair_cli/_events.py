"""``alnair events``: tail every message on the bus, decoded by its subject's type."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from google.protobuf import text_format

from alnair_common import Bus, DecodeError, UnknownSubjectError
from alnair_common.bus import decode
from alnair_common.subjects import Transport, spec_for


def render(subject: str, data: bytes) -> str:
    """One line per message; undecodable payloads are shown as such, not hidden."""
    now = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
    try:
        spec = spec_for(subject)
    except UnknownSubjectError:
        return f"{now} {subject} <{len(data)} bytes, subject not in the table>"
    for message_type in (spec.message, spec.reply):
        if message_type is None:
            continue
        try:
            msg = decode(subject, data, message_type)
        except DecodeError:
            continue
        body = text_format.MessageToString(msg, as_one_line=True)
        return f"{now} {subject} {message_type.DESCRIPTOR.name} {{{body}}}"
    return f"{now} {subject} <{len(data)} bytes that are not {spec.message.DESCRIPTOR.name}>"


def is_request(subject: str) -> bool:
    try:
        return spec_for(subject).transport is Transport.REQUEST
    except UnknownSubjectError:
        return False


async def tail(bus: Bus, pattern: str, limit: int | None, emit: Callable[[str], None],
               *, requests: bool = False) -> None:
    """Print messages on ``pattern`` until ``limit`` were shown (forever if None).

    Health and status queries are left out unless ``requests``: every `alnair status`
    would otherwise flood the view.
    """
    done = asyncio.Event()
    seen = 0

    async def on_msg(msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal seen
        if limit is not None and seen >= limit:
            return
        if msg.subject.startswith(("_INBOX.", "$")) or (not requests and is_request(msg.subject)):
            return
        emit(render(msg.subject, msg.data))
        seen += 1
        if limit is not None and seen >= limit:
            done.set()

    await bus.nc.subscribe(pattern, cb=on_msg)
    await done.wait()
