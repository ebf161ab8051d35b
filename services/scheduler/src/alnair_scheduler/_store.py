"""Committed allocations in the ``gpu_allocations`` KV bucket, one key per card.

Every change is a compare-and-set on the card's key: the capacity check runs on the value
read at the revision being replaced, so a share that another scheduler committed in the
meantime is always counted (the loser re-reads and re-checks). The value carries the
capacity it was checked against, so it stays meaningful without the inventory. The key of
a card is :func:`alnair_common.allocations.card_key`, shared with the adapters that check a
bind decision against this bucket before carrying it out.
"""

from __future__ import annotations

from alnair.v1 import allocation_pb2
from alnair_common import Bus, RevisionConflictError, TemporaryError, TypedKV
from alnair_common.allocations import BUCKET, card_key

from ._convert import share_proto, shares_from_allocation
from ._domain import Card, Share
from ._errors import CardFullError


class AllocationStore:
    """The bucket, plus the last value and revision this process wrote per card: a commit
    tries that revision first (one round trip instead of read + write) and falls back to a
    fresh read when another writer moved the key on."""

    def __init__(self, kv: TypedKV[allocation_pb2.CardAllocation]) -> None:
        self.kv = kv
        self._last: dict[str, tuple[allocation_pb2.CardAllocation, int]] = {}

    @classmethod
    async def open(cls, bus: Bus) -> AllocationStore:
        return cls(await TypedKV.open(bus, BUCKET, allocation_pb2.CardAllocation))

    async def load_all(self) -> list[tuple[Card, list[Share]]]:
        out = []
        for key in await self.kv.keys():
            entry = await self.kv.get(key)
            if entry is not None:
                out.append(shares_from_allocation(entry.value))
        return out

    async def read(self, gpu_uuid: str) -> tuple[Card, list[Share]] | None:
        entry = await self.kv.get(card_key(gpu_uuid))
        return None if entry is None else shares_from_allocation(entry.value)

    async def commit(self, card: Card, share: Share) -> list[Share]:
        """Add ``share`` to ``card`` unless it would go over capacity; the card's shares after.

        Raises :class:`CardFullError` when the card (as committed by anyone) has no room.
        Committing a share the card already holds is a no-op (a retried commit).
        """

        def change(current: allocation_pb2.CardAllocation | None) -> allocation_pb2.CardAllocation:
            value = current or allocation_pb2.CardAllocation()
            value.node, value.gpu_uuid, value.gpu_index = card.node, card.uuid, card.index
            value.capacity_memory_gib = card.memory_gib
            value.capacity_compute_percent = card.compute_percent
            if any(s.workload.uid == share.workload.uid for s in value.shares):
                return value
            used_m = sum(s.memory_gib for s in value.shares)
            used_c = sum(s.compute_percent for s in value.shares)
            if used_m + share.memory_gib > card.memory_gib:
                raise CardFullError(card.uuid, f"{share.memory_gib} GiB requested, "
                                    f"{card.memory_gib - used_m} GiB of {card.memory_gib} free")
            if used_c + share.compute_percent > card.compute_percent:
                raise CardFullError(card.uuid, f"{share.compute_percent} % requested, "
                                    f"{card.compute_percent - used_c} % of {card.compute_percent} free")
            value.shares.append(share_proto(share))
            return value

        key = card_key(card.uuid)
        cached = self._last.pop(key, None)
        if cached is not None:
            base = allocation_pb2.CardAllocation()
            base.CopyFrom(cached[0])
            try:
                new = change(base)
                revision = await self.kv.update(key, new, cached[1])
                self._last[key] = (new, revision)
                return shares_from_allocation(new)[1]
            except (RevisionConflictError, CardFullError):
                pass  # someone else wrote the card: decide again on what the bucket holds
        for _ in range(20):
            current = await self.kv.get(key)
            new = change(_copy(current.value) if current else None)
            try:
                if current is None:
                    revision = await self.kv.create(key, new)
                else:
                    revision = await self.kv.update(key, new, current.revision)
            except RevisionConflictError:
                continue
            self._last[key] = (new, revision)
            return shares_from_allocation(new)[1]
        raise TemporaryError(f"{BUCKET}/{key}: lost 20 compare-and-set races committing "
                             f"{share.workload.uid}")

    async def release(self, gpu_uuid: str, uid: str, *, attempts: int = 20) -> list[Share] | None:
        """Remove ``uid``'s share; the card's shares after, or None when it held none."""
        key = card_key(gpu_uuid)
        self._last.pop(key, None)
        for _ in range(attempts):
            entry = await self.kv.get(key)
            if entry is None:
                return None
            kept = [s for s in entry.value.shares if s.workload.uid != uid]
            if len(kept) == len(entry.value.shares):
                return shares_from_allocation(entry.value)[1]
            value = allocation_pb2.CardAllocation()
            value.CopyFrom(entry.value)
            del value.shares[:]
            value.shares.extend(kept)
            try:
                revision = await self.kv.update(key, value, entry.revision)
            except RevisionConflictError:
                continue
            self._last[key] = (value, revision)
            return shares_from_allocation(value)[1]
        raise TemporaryError(f"{BUCKET}/{key}: lost {attempts} compare-and-set races releasing {uid}")


def _copy(value: allocation_pb2.CardAllocation) -> allocation_pb2.CardAllocation:
    out = allocation_pb2.CardAllocation()
    out.CopyFrom(value)
    return out
