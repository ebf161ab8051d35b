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
HANDLER_ERRORS = Counter(
    "alnair_bus_handler_errors_total", "Handlers that raised, by outcome (retry or term).",
    ["service", "subject", "outcome"],
)


def pattern_of(subject: str) -> str:
    """The table pattern of ``subject`` (``alnair.node.<node>.inventory``), never raw ids."""
    try:
        return subjects.spec_for(subject).pattern
    except UnknownSubjectError:
        return "unknown"
