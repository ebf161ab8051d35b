"""Typed payloads: every subject carries exactly the protobuf message the table names."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import DecodeError as ProtoDecodeError
from google.protobuf.message import Message

from .. import subjects
from ..errors import DecodeError, PermanentError

M = TypeVar("M", bound=Message)


def encode(subject: str, message: Message) -> bytes:
    """Serialise ``message`` after checking it is the type ``subject`` carries."""
    spec = subjects.spec_for(subject)
    expected = spec.message
    if spec.reply is not None and isinstance(message, spec.reply):
        expected = spec.reply
    if not isinstance(message, expected):
        raise PermanentError(
            f"{subject!r} carries {expected.DESCRIPTOR.full_name}, "
            f"not {message.DESCRIPTOR.full_name}"
        )
    return message.SerializeToString()


def decode(subject: str, data: bytes, message_type: type[M]) -> M:
    """Parse ``data`` as ``message_type``; a payload that is not one raises DecodeError.

    Protobuf happily parses many random byte strings, so unknown fields are treated as a
    sign that the payload was not meant for this subject (or comes from a newer contract)
    and are rejected too: the subscriber logs and counts them instead of acting on garbage.
    """
    msg = message_type()
    try:
        msg.ParseFromString(data)
    except (ProtoDecodeError, ValueError, RuntimeError) as e:
        raise DecodeError(subject, message_type.DESCRIPTOR.full_name, str(e), len(data)) from e
    unknown = _unknown_fields(msg)
    if unknown:
        raise DecodeError(
            subject, message_type.DESCRIPTOR.full_name,
            f"unknown field number(s) {sorted(unknown)}", len(data),
        )
    return msg


def _unknown_fields(msg: Message) -> set[int]:
    """Field numbers present on the wire that the schema (recursively) does not know."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    found = {f.field_number for f in UnknownFieldSet(msg)}
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            values = list(value.values()) if value_field.message_type else []
        elif field.is_repeated:
            values = value
        else:
            values = [value]
        for item in values:
            found |= _unknown_fields(item)
    return found
