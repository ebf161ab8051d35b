"""Typed payloads: every subject carries exactly the protobuf message the table names.

Outgoing messages are checked against the table, so our own code cannot publish the wrong
type. Incoming payloads that do not parse raise :class:`DecodeError` (the subscriber logs,
counts and drops them). Payloads with fields this contract does not know are *delivered*:
that is how a newer producer talks to an older consumer during a rolling upgrade, and
dropping them would lose records. They are counted (``alnair_bus_unknown_fields_total``)
and logged once per subject pattern and field set, because the same symptom also means a
message of another type was sent on the subject.
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import DecodeError as ProtoDecodeError
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from .. import subjects
from ..errors import DecodeError, PermanentError
from ..logs import get_logger
from . import _metrics

M = TypeVar("M", bound=Message)
log = get_logger("alnair.bus")
_reported: set[tuple[str, tuple[int, ...]]] = set()


def encode(subject: str, message: Message, spec: subjects.SubjectSpec | None = None) -> bytes:
    """Serialise ``message`` after checking it is the type ``subject`` carries."""
    spec = spec or subjects.spec_for(subject)
    if type(message) is spec.message:  # the common case, without the isinstance chain
        return message.SerializeToString()
    if not isinstance(message, spec.message) and not (
        spec.reply is not None and isinstance(message, spec.reply)
    ):
        raise PermanentError(
            f"{subject!r} carries {spec.message.DESCRIPTOR.full_name}, "
            f"not {message.DESCRIPTOR.full_name}"
        )
    return message.SerializeToString()


def decode(subject: str, data: bytes, message_type: type[M]) -> M:
    """Parse ``data`` as ``message_type``; a payload that does not parse raises DecodeError."""
    msg = message_type()
    try:
        msg.ParseFromString(data)
    except (ProtoDecodeError, ValueError, RuntimeError) as e:
        raise DecodeError(subject, message_type.DESCRIPTOR.full_name, str(e), len(data)) from e
    unknown = UnknownFieldSet(msg)
    if len(unknown):
        _note_unknown(subject, message_type, tuple(sorted({f.field_number for f in unknown})))
    return msg


def _note_unknown(subject: str, message_type: type[Message], numbers: tuple[int, ...]) -> None:
    pattern = _metrics.pattern_of(subject)
    _metrics.counter(_metrics.UNKNOWN_FIELDS, pattern).inc()
    if (pattern, numbers) not in _reported:
        _reported.add((pattern, numbers))
        log.warning(
            "message has fields this contract does not know: a newer producer, or a message "
            "of another type on this subject", subject=subject,
            message=message_type.DESCRIPTOR.full_name, field_numbers=list(numbers),
        )
