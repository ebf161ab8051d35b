"""Payloads are checked against the subject table both ways."""

from __future__ import annotations

import pytest

from alnair.v1 import inventory_pb2, metrics_pb2, platform_pb2, workload_pb2
from alnair_common import DecodeError, PermanentError
from alnair_common.bus import _metrics, decode, encode

SUBJECT = "alnair.node.n1.inventory"
SUBJECT_PATTERN = "alnair.node.<node>.inventory"


def _inventory() -> inventory_pb2.NodeInventory:
    return inventory_pb2.NodeInventory(
        node="n1",
        gpus=[inventory_pb2.Gpu(uuid="GPU-1", index=0, model="NVIDIA H200",
                                memory_bytes=150_754_820_096, sm_count=132)],
    )


def test_round_trip() -> None:
    assert decode(SUBJECT, encode(SUBJECT, _inventory()), inventory_pb2.NodeInventory) == \
        _inventory()


def test_wrong_message_type_is_refused_on_publish() -> None:
    with pytest.raises(PermanentError, match="carries alnair.v1.NodeInventory, not"):
        encode(SUBJECT, workload_pb2.WorkloadEvent())


def test_reply_type_is_accepted_on_request_subjects() -> None:
    assert encode("alnair.health.x", platform_pb2.HealthReport(service="x"))


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x08"])
def test_truncated_or_invalid_bytes_raise_decode_error(garbage: bytes) -> None:
    with pytest.raises(DecodeError, match=SUBJECT):
        decode(SUBJECT, garbage, inventory_pb2.NodeInventory)


def test_unknown_fields_are_delivered_and_counted() -> None:
    """A newer producer's extra fields must not lose its records during a rolling upgrade."""
    counted = _metrics.counter(_metrics.UNKNOWN_FIELDS, SUBJECT_PATTERN)
    before = counted._value.get()
    newer = _inventory().SerializeToString() + b"\xf8\x07\x01"  # field 127, varint 1
    decoded = decode(SUBJECT, newer, inventory_pb2.NodeInventory)
    assert (decoded.node, list(decoded.gpus)) == (_inventory().node, list(_inventory().gpus))
    assert counted._value.get() == before + 1


def test_a_message_of_another_type_is_counted_as_unknown_fields() -> None:
    counted = _metrics.counter(_metrics.UNKNOWN_FIELDS, SUBJECT_PATTERN)
    before = counted._value.get()
    other = metrics_pb2.CudaSample(kernel_launches_total=5, memory_used_bytes=1).SerializeToString()
    decode(SUBJECT, other, inventory_pb2.NodeInventory)
    assert counted._value.get() == before + 1
