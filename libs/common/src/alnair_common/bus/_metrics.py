"""Prometheus counters of the bus client, labelled by subject pattern (bounded cardinality)."""

from __future__ import annotations

from prometheus_client import Counter

from .. import subjects
from ..errors import UnknownSubjectError

PUBLISHED = Counter(
    "alnair_bus_published_messages_total", "Messages published on the bus.",
    ["service", "subject"],
)
RECEIVED = Counter(
    "alnair_bus_received_messages_total", "Messages received and decoded.",
    ["service", "subject"],
)
DECODE_ERRORS = Counter(
    "alnair_bus_decode_errors_total", "Payloads that were not the message their subject carries.",
    ["service", "subject"],
)
UNKNOWN_FIELDS = Counter(
    "alnair_bus_unknown_fields_total",
    "Delivered messages with fields the contract does not know (newer producer or wrong type).",
    ["subject"],
)
HANDLER_ERRORS = Counter(
    "alnair_bus_handler_errors_total", "Handlers that raised, by outcome (retry or term).",
    ["service", "subject", "outcome"],
)


def counter(family: Counter, *labels: str) -> Counter:
    """The labelled child of ``family``, cached: label lookup is measurable per message."""
    key = (id(family), labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = family.labels(*labels)
    return child


_children: dict[tuple[int, tuple[str, ...]], Counter] = {}


def pattern_of(subject: str) -> str:
    """The table pattern of ``subject`` (``alnair.node.<node>.inventory``), never raw ids.

    Cheap: ``spec_for`` is cached, so this runs on every message."""
    try:
        return subjects.spec_for(subject).pattern
    except UnknownSubjectError:
        return "unknown"
