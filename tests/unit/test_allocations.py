"""alnair_common.allocations: the key of a card and the adapters' check of a bind decision,
shared with the scheduler's store so writer and readers cannot drift."""

from __future__ import annotations

import pytest

from alnair.v1 import allocation_pb2, common_pb2
from alnair_common import PermanentError
from alnair_common.allocations import REASONS, UncommittedShareError, card_key, committed_share

REF = common_pb2.WorkloadRef(uid="u1", name="train", namespace="ml", mode=common_pb2.MODE_KUBERNETES)


def card(*shares: tuple[str, int, int], memory: int = 80, compute: int = 100,
         node: str = "node-a") -> allocation_pb2.CardAllocation:
    value = allocation_pb2.CardAllocation(node=node, gpu_uuid="GPU-1.x", gpu_index=0,
                                          capacity_memory_gib=memory, capacity_compute_percent=compute)
    for uid, m, c in shares:
        value.shares.add(workload=common_pb2.WorkloadRef(uid=uid), memory_gib=m, compute_percent=c)
    return value


def assignment(memory: int = 40, compute: int = 30, node: str = "node-a",
               gpu: str = "GPU-1.x") -> common_pb2.GpuAssignment:
    return common_pb2.GpuAssignment(node=node, gpu_uuid=gpu, memory_gib=memory, compute_percent=compute)


def test_the_scheduler_store_uses_the_shared_key() -> None:
    from alnair_scheduler import _store

    assert _store.card_key is card_key and _store.BUCKET == "gpu_allocations"
    assert card_key("GPU-5b7c.a/b c") == "GPU-5b7c_a_b_c"


def test_a_committed_share_is_returned() -> None:
    share = committed_share(card(("other", 40, 70), ("u1", 40, 30)), REF, assignment())
    assert (share.workload.uid, share.memory_gib, share.compute_percent) == ("u1", 40, 30)


@pytest.mark.parametrize(("value", "assigned", "reason", "message"), [
    (None, assignment(), "not-committed", "no share of that card is committed"),
    (card(("other", 40, 30)), assignment(), "not-committed", "its holders: other"),
    (card(("u1", 40, 30)), assignment(gpu="GPU-1_x"), "not-committed", "no share of that card"),
    (card(("u1", 40, 30)), assignment(node="node-b"), "wrong-node", "committed on node 'node-a'"),
    (card(("u1", 8, 30)), assignment(), "wrong-share", "the committed share is 8 GiB and 30 %"),
    (card(("u1", 40, 20)), assignment(), "wrong-share", "the committed share is 40 GiB and 20 %"),
    (card(("old", 80, 50), ("u1", 40, 30)), assignment(), "over-capacity",
     "add up to 120 GiB and 80 %, over its capacity of 80 GiB and 100 %"),
    (card(("old", 10, 80), ("u1", 40, 30)), assignment(), "over-capacity", "110 %"),
], ids=["no-key", "other-holder", "key-collision", "other-node", "other-memory", "other-compute",
        "memory-over", "compute-over"])
def test_what_is_not_committed_as_decided_is_refused_with_a_bounded_reason(
        value, assigned, reason: str, message: str) -> None:
    with pytest.raises(UncommittedShareError) as caught:
        committed_share(value, REF, assigned)
    assert caught.value.reason == reason and reason in REASONS
    assert isinstance(caught.value, PermanentError) and message in str(caught.value)
    assert "ml/train (u1)" in str(caught.value)


def test_the_callers_own_card_caps_a_capacity_the_value_overstates() -> None:
    value = card(("old", 80, 50), ("u1", 80, 30), memory=160)
    assert committed_share(value, REF, assignment(80)).memory_gib == 80
    with pytest.raises(UncommittedShareError, match="over its capacity of 80 GiB") as caught:
        committed_share(value, REF, assignment(80), card_memory_gib=80)
    assert caught.value.reason == "over-capacity"
